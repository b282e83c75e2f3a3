/**
 * The credential of a forwarded call: an HMAC-SHA256 over the call's identity and the time it was signed,
 * with a key derived from the master key, so only processes given the same `RUNPLANE_MASTER_KEY` forward
 * calls to each other. A header carries it: `v1,<at ms>,<lowercase hex HMAC>`.
 */
import { createHmac, createSecretKey, hkdfSync, type KeyObject, timingSafeEqual } from "node:crypto";
import { inspect } from "node:util";
import type { MasterKey } from "../keys/mod.ts";

/** The HKDF `info` of the forwarding key: a key for this job alone, unrelated to the master key's others. */
const FORWARD_KEY_INFO = "runplane forwarded call v1";

/** How far a credential's time may be from the verifier's clock, either way, by default: 5 minutes. */
export const FORWARD_SKEW_MS = 300_000;

/** The key forwarded calls are signed and verified with; hidden from logs, JSON and `util.inspect`. */
export class ForwardKey {
  readonly #key: KeyObject;
  constructor(bytes: Uint8Array) {
    this.#key = createSecretKey(bytes);
  }
  /** The HMAC-SHA256 of `text`, in lowercase hex. */
  mac(text: string): string {
    return createHmac("sha256", this.#key).update(text).digest("hex");
  }
  toJSON(): string {
    return "[redacted]";
  }
  toString(): string {
    return "[redacted]";
  }
  [inspect.custom](): string {
    return "ForwardKey [redacted]";
  }
}

/** What a forwarded call's credential covers. */
export interface ForwardFields {
  runId: string;
  projectId: string;
  appId: string;
  functionName: string;
  /** When it was signed, in epoch milliseconds. */
  at: number;
  /**
   * `websocket` for a WebSocket opened on another host (its `functionName` is the path): signed too, so a
   * call's credential never opens a WebSocket, nor the reverse.
   */
  kind?: "websocket";
}

/** Derives the forwarding key from the master key (HKDF-SHA256, empty salt, info `runplane forwarded call v1`). */
export function forwardKey(masterKey: MasterKey): ForwardKey {
  return new ForwardKey(new Uint8Array(hkdfSync("sha256", masterKey.bytes(), new Uint8Array(0), FORWARD_KEY_INFO, 32)));
}

/** The signed text: a JSON array, so no field's content can be read as another's boundary. */
function signedText(fields: ForwardFields): string {
  const fixed = ["v1", fields.at, fields.runId, fields.projectId, fields.appId, fields.functionName];
  return JSON.stringify(fields.kind === undefined ? fixed : [...fixed, fields.kind]);
}

/** The `X-Runplane-Forwarded` header value for a call: `v1,<at ms>,<hex HMAC>`. */
export function signForward(key: ForwardKey, fields: ForwardFields): string {
  return `v1,${fields.at},${key.mac(signedText(fields))}`;
}

/** Options of `verifyForward`. */
export interface VerifyForwardOptions {
  /** The verifier's time, in epoch milliseconds. */
  now: number;
  /** How far the credential's time may be from `now`, either way; default 5 minutes. */
  skewMs?: number;
}

const HEADER = /^v1,(\d{1,16}),([0-9a-f]{64})$/;

/**
 * Whether `header` is a valid credential for the call `fields` names, signed within `skewMs` of `now`.
 * A missing or malformed header is false, never an exception; the MACs are compared in constant time.
 */
export function verifyForward(
  key: ForwardKey,
  header: string | undefined | null,
  fields: Omit<ForwardFields, "at">,
  options: VerifyForwardOptions,
): boolean {
  const match = HEADER.exec(header ?? "");
  if (!match) return false;
  const at = Number(match[1]);
  if (Math.abs(options.now - at) > (options.skewMs ?? FORWARD_SKEW_MS)) return false;
  const expected = Buffer.from(key.mac(signedText({ ...fields, at })), "hex");
  return timingSafeEqual(expected, Buffer.from(match[2], "hex"));
}
