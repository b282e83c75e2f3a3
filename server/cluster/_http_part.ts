/**
 * How a forwarded call of a custom runtime's route by another method than POST carries what is passed to
 * the app besides its body (the hop's own body): its method, query string and headers, as base64url JSON
 * in one header of the hop (`X-Runplane-Http`), so that any byte of a header value travels unchanged.
 */
import { ProblemError } from "../problems/mod.ts";
import type { HttpRequestPart } from "../runs/mod.ts";

/** The hop's header that carries it. */
export const FORWARD_HTTP_HEADER = "x-runplane-http";

/** `{m, q, h}`: the method, the query string, the headers (name, value). */
interface Wire {
  m: string;
  q: string;
  h: Array<[string, string]>;
}

/** The header's value for `part` (its body travels as the hop's body). */
export function encodeHttpPart(part: HttpRequestPart): string {
  const wire: Wire = { m: part.method, q: part.query, h: part.headers };
  return Buffer.from(JSON.stringify(wire), "utf8").toString("base64url");
}

function isWire(value: unknown): value is Wire {
  const w = value as Wire | null;
  return typeof w === "object" && w !== null && typeof w.m === "string" && /^[A-Z]{1,16}$/.test(w.m)
    && typeof w.q === "string" && Array.isArray(w.h)
    && w.h.every((pair) => Array.isArray(pair) && pair.length === 2 && pair.every((x) => typeof x === "string"));
}

/** The part a header's value carries, with `body`; a 400 problem for a value that is not one. */
export function decodeHttpPart(value: string, body: Uint8Array): HttpRequestPart {
  let wire: unknown;
  try {
    wire = JSON.parse(Buffer.from(value, "base64url").toString("utf8"));
  } catch {
    wire = undefined;
  }
  if (!isWire(wire)) throw new ProblemError("bad-request", `The forwarded call's ${FORWARD_HTTP_HEADER} is malformed`);
  return { method: wire.m, query: wire.q, headers: wire.h, body };
}
