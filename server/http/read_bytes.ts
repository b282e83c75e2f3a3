/**
 * A request body of any media type read whole into memory, as the caller sent it: a call of a custom
 * runtime's route passes it on to the app unchanged (`callApp…`). Bounded by the JSON body limit.
 */
import { ProblemError } from "../problems/mod.ts";

/** How much of a body past its limit is read and dropped, so a client still sending reads the 413. */
const DRAIN_BYTES = 16 * 1024 * 1024;

function tooLarge(limitBytes: number): ProblemError {
  return new ProblemError("content-too-large", `The body is larger than the limit of ${limitBytes} bytes`);
}

/**
 * The bytes of `source`; rejects with a 413 problem past `limitBytes` (the caller closes the
 * connection). `declared` is the request's Content-Length, refused at once when it is past the limit.
 */
export async function readBytes(
  source: AsyncIterable<Uint8Array>,
  options: { limitBytes: number; declared?: number },
): Promise<Uint8Array> {
  const { limitBytes } = options;
  if (options.declared !== undefined && options.declared > limitBytes) throw tooLarge(limitBytes);
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of source) {
    size += chunk.length;
    if (size <= limitBytes) chunks.push(chunk);
    else if (size - limitBytes > DRAIN_BYTES) throw tooLarge(limitBytes);
  }
  if (size > limitBytes) throw tooLarge(limitBytes);
  return Buffer.concat(chunks, size);
}
