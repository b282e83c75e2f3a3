/**
 * Cryptographically random bytes for ids, drawn from a pool refilled in 4 KiB blocks: one
 * `randomFillSync` per few hundred ids instead of one per id (each call costs microseconds on a hot
 * path that makes two ids per request).
 */
import { randomFillSync } from "node:crypto";

const POOL_BYTES = 4096;
const pool = Buffer.allocUnsafe(POOL_BYTES);
let offset = POOL_BYTES;

/** `size` fresh random bytes (at most 256), as a view into the pool: use them before the next call. */
export function randomBytesPooled(size: number): Buffer {
  if (size > 256) throw new RangeError("randomBytesPooled takes at most 256 bytes");
  if (offset + size > POOL_BYTES) {
    randomFillSync(pool);
    offset = 0;
  }
  const bytes = pool.subarray(offset, offset + size);
  offset += size;
  return bytes;
}
