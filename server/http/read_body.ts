import coBody from "co-body";
import type { Context } from "koa";
import { ProblemError } from "../problems/mod.ts";
import { MAX_JSON_DEPTH, nestsDeeperThan } from "./json_depth.ts";
import { readBytes } from "./read_bytes.ts";
import { spoolBody } from "./spool_body.ts";
import { StreamedBody } from "./streamed_body.ts";

/**
 * A body: a JSON body's value and its text as received (handed on as is where the value must not
 * change), or a body of another media type spooled to a file (a `SpooledBody`, `text` undefined).
 */
export interface ReadBody {
  value: unknown;
  text: string | undefined;
}

/** Limits of `createBodyReader`. */
export interface BodyLimits {
  /** The largest JSON body. */
  json: number;
  /** The largest body of another media type (a deploy bundle). */
  bytes: number;
  /** Where a body of another media type is spooled (a temporary file the router removes). */
  spoolDir: string;
}

/** Reads JSON request bodies with a size and a nesting limit; every failure becomes a problem. */
export type BodyReader = (ctx: Context, contentTypes: readonly string[]) => Promise<ReadBody | undefined>;

// co-body's strict mode refuses a body that does not start with `{` or `[` with this message, before
// parsing it; it keeps the text on the error.
const NOT_OBJECT_OR_ARRAY = "invalid JSON, only supports object and array";

/**
 * A body refused by the strict mode that is well-formed JSON all the same (`5`, `"x"`, `null`): it is
 * handed on as parsed, so validation answers it as it answers `[1,2]`, not as malformed.
 */
function wellFormedScalar(error: { message?: string; body?: unknown }): { wellFormed: boolean; value?: unknown } {
  if (error.message !== NOT_OBJECT_OR_ARRAY || typeof error.body !== "string") return { wellFormed: false };
  try {
    return { wellFormed: true, value: JSON.parse(error.body) };
  } catch {
    return { wellFormed: false };
  }
}

/**
 * Creates a body reader: undefined for a request without a body, the parsed JSON and its text for a JSON
 * body, a body of another media type the operation takes spooled to a file, and for an operation that
 * takes any (`*\/*`) the bytes as sent (a `Uint8Array`, within the JSON limit). 415 for a media type the
 * operation does not take, 413 above the limit, 400 for malformed JSON or nesting deeper than
 * `MAX_JSON_DEPTH`.
 */
export function createBodyReader(limits: BodyLimits): BodyReader {
  const limitBytes = limits.json;
  // co-body (the parser inside koa-body, called directly: the media type is checked here already) reads
  // the body whatever its Content-Encoding, in its charset, refuses `__proto__` keys and keeps the text.
  const jsonOptions = { limit: limitBytes, strict: true, returnRawBody: true } as const;
  return async function readBody(ctx, contentTypes) {
    // Koa parses the header anew at each read of `length`.
    const length = ctx.request.length;
    if (!(length !== undefined && length > 0) && ctx.get("Transfer-Encoding") === "") return undefined;
    if (contentTypes.includes("*/*")) {
      try {
        return { value: await readBytes(ctx.req, { limitBytes, declared: length }), text: undefined };
      } catch (error) {
        if (error instanceof ProblemError) ctx.set("Connection", "close");
        throw error;
      }
    }
    if (contentTypes.length === 1 && contentTypes[0] === "application/octet-stream") {
      if (!ctx.is("application/octet-stream")) {
        throw new ProblemError(
          "unsupported-media-type",
          `Send the body as application/octet-stream, not ${ctx.get("Content-Type") || "no content type"}`,
        );
      }
      // Read by the handler as it arrives, never held or spooled here.
      return { value: new StreamedBody(ctx.req, length), text: undefined };
    }
    // The common case without type-is (~0.7 µs a call): a bare `application/json` the operation takes.
    const plainJson = ctx.get("Content-Type") === "application/json" && contentTypes.includes("application/json");
    if (!plainJson && !ctx.is(...contentTypes)) {
      throw new ProblemError(
        "unsupported-media-type",
        `Send the body as ${contentTypes.join(" or ")}, not ${ctx.get("Content-Type") || "no content type"}`,
      );
    }
    if (!plainJson && !ctx.is("json")) {
      if (length !== undefined && length > limits.bytes) {
        ctx.set("Connection", "close");
        throw new ProblemError("content-too-large", `The body is ${length} bytes; the limit is ${limits.bytes}`);
      }
      try {
        const value = await spoolBody(ctx.req as AsyncIterable<Uint8Array>, {
          dir: limits.spoolDir,
          limitBytes: limits.bytes,
        });
        return { value, text: undefined };
      } catch (error) {
        // Stop reading; the connection closes after the problem is sent, so the rest is never uploaded.
        if (error instanceof ProblemError) ctx.set("Connection", "close");
        throw error;
      }
    }
    if (length !== undefined && length > limitBytes) {
      throw new ProblemError("content-too-large", `The body is ${length} bytes; the limit is ${limitBytes}`);
    }
    let read: { parsed: unknown; raw: string };
    try {
      read = await coBody.json(ctx.req, jsonOptions) as { parsed: unknown; raw: string };
    } catch (error) {
      const e = error as { status?: number; type?: string; message?: string; body?: unknown };
      const scalar = wellFormedScalar(e);
      if (scalar.wellFormed) return { value: scalar.value, text: e.body as string };
      if (e.status === 413 || e.type === "entity.too.large") {
        throw new ProblemError("content-too-large", `The body is larger than the limit of ${limitBytes} bytes`);
      }
      if (e.status === 415 || e.type === "charset.unsupported" || e.type === "encoding.unsupported") {
        throw new ProblemError("unsupported-media-type", e.message ?? "Unsupported body encoding: send UTF-8 JSON");
      }
      throw new ProblemError("malformed-json", `The body is not valid JSON: ${e.message ?? "parse error"}`);
    }
    const value = read.parsed;
    if (nestsDeeperThan(value, MAX_JSON_DEPTH)) {
      throw new ProblemError(
        "bad-request",
        `The body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels; flatten it`,
      );
    }
    return { value, text: read.raw };
  };
}
