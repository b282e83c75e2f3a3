/**
 * A request body of bytes (a deploy bundle) spooled to a temporary file as it arrives: size-limited and
 * hashed on the way, so no step holds the whole body in memory. The router removes the file once the
 * handler has answered, whatever the outcome.
 */
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { ProblemError } from "../problems/mod.ts";

/** A body on disk: its file, its length and its content address (`sha256:<hex>`). */
export class SpooledBody {
  constructor(readonly path: string, readonly size: number, readonly digest: string) {}

  /** Removes the file (nothing when it is gone already). */
  remove(): Promise<void> {
    return rm(this.path, { force: true });
  }
}

/** Options of `spoolBody`. */
export interface SpoolOptions {
  /** The folder the file is written in (made when missing). */
  dir: string;
  /** The most bytes the body may have: past it a 413 problem, and the file is removed. */
  limitBytes: number;
}

/** Thrown past the limit; the caller closes the connection so the rest is never uploaded. */
function tooLarge(limitBytes: number): ProblemError {
  return new ProblemError("content-too-large", `The body is larger than the limit of ${limitBytes} bytes`);
}

/** How much of a body past its limit is read and dropped before the request is ended anyway. */
const DRAIN_BYTES = 16 * 1024 * 1024;

/**
 * Writes `source` to a new file under `options.dir`, counting and hashing it; rejects with a 413 problem
 * past `options.limitBytes`. On any failure the file is removed.
 */
export async function spoolBody(source: AsyncIterable<Uint8Array>, options: SpoolOptions): Promise<SpooledBody> {
  await mkdir(options.dir, { recursive: true });
  const path = join(options.dir, `body-${Date.now()}-${randomBytes(8).toString("hex")}.part`);
  const hash = createHash("sha256");
  let size = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      size += chunk.length;
      if (size <= options.limitBytes) {
        hash.update(chunk);
        return done(null, chunk);
      }
      // Past the limit nothing more is written, but a little more is read (and dropped): a client still
      // sending then reads the 413 instead of a reset connection, which ending the request here would give it.
      if (size - options.limitBytes > DRAIN_BYTES) return done(tooLarge(options.limitBytes));
      done();
    },
    flush(done) {
      done(size > options.limitBytes ? tooLarge(options.limitBytes) : null);
    },
  });
  try {
    await pipeline(source, meter, createWriteStream(path, { flags: "wx", mode: 0o600 }));
  } catch (error) {
    await rm(path, { force: true });
    throw error;
  }
  return new SpooledBody(path, size, `sha256:${hash.digest("hex")}`);
}
