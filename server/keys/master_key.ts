/**
 * The master key (`RUNPLANE_MASTER_KEY`): 32 random bytes, base64, given to every process that shares a
 * PostgreSQL store. It seals the keys kept in the database; it is never stored, logged or shown.
 */
import { inspect } from "node:util";

/** How to make a master key, for the errors that ask for one. */
export const MASTER_KEY_HOWTO =
  "make one with `openssl rand -base64 32` (or `node -e \"console.log(crypto.randomBytes(32).toString('base64'))\"`) and give the same one to every process";

/** A master key: its bytes, hidden from logs, JSON and `util.inspect`. */
export class MasterKey {
  readonly #bytes: Uint8Array;
  constructor(bytes: Uint8Array) {
    if (bytes.length !== 32) throw new Error("A master key is 32 bytes");
    this.#bytes = Uint8Array.from(bytes);
  }
  /** The key's 32 bytes (a copy). */
  bytes(): Uint8Array {
    return Uint8Array.from(this.#bytes);
  }
  toJSON(): string {
    return "[redacted]";
  }
  toString(): string {
    return "[redacted]";
  }
  [inspect.custom](): string {
    return "MasterKey [redacted]";
  }
}

/**
 * Parses a master key: base64 (standard or URL-safe, padding optional) of exactly 32 bytes. Throws with
 * what is expected and how to make one; the message never repeats the text given.
 */
export function parseMasterKey(raw: string): MasterKey {
  const text = raw.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(text)) {
    throw new Error(`must be 32 random bytes in base64; ${MASTER_KEY_HOWTO}`);
  }
  const bytes = Buffer.from(text.replace(/-/g, "+").replace(/_/g, "/"), "base64");
  if (bytes.length !== 32) {
    throw new Error(`must be 32 random bytes in base64 (this is ${bytes.length}); ${MASTER_KEY_HOWTO}`);
  }
  return new MasterKey(bytes);
}
