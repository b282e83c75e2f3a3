/**
 * A custom runtime's answer passed through (a call by another method than POST) recorded as it passes:
 * its body is kept while it is small, and becomes the run's result at its end — parsed when it is JSON,
 * as text when it is text, null for other media types. A larger body is recorded as truncated.
 */
import type { HttpResponsePart } from "./executor.ts";
import type { RunRecorder } from "./run_call.ts";

/** The most of a body held to become the result (the default result limit: larger ones are truncated). */
const KEPT_BYTES = 1024 * 1024;

/** The media type of `headers`' `Content-Type`, lowercase and without parameters; empty for none. */
function mediaType(headers: Array<[string, string]>): string {
  const value = headers.find(([name]) => name.toLowerCase() === "content-type")?.[1] ?? "";
  return value.split(";")[0].trim().toLowerCase();
}

/** The result a whole body stands for: JSON parsed, text as it is, anything else null. */
function resultOf(body: Buffer, type: string): unknown {
  if (body.length === 0) return null;
  if (type === "application/json" || type.endsWith("+json")) {
    try {
      return JSON.parse(body.toString("utf8"));
    } catch {
      return body.toString("utf8");
    }
  }
  if (type.startsWith("text/") || type === "application/x-ndjson") return body.toString("utf8");
  return null;
}

/**
 * The answer's body as it comes, recorded on the way: its end records success, a failure is recorded
 * and thrown, a reader that stops early ends the run `cancelled`.
 */
export async function* recordedBody(answer: HttpResponsePart, record: RunRecorder): AsyncGenerator<Uint8Array> {
  const type = mediaType(answer.headers);
  const kept: Uint8Array[] = [];
  let size = 0;
  let finished = false;
  try {
    for await (const chunk of answer.body) {
      size += chunk.length;
      if (size <= KEPT_BYTES) kept.push(chunk);
      yield chunk;
    }
    finished = true;
    if (size > KEPT_BYTES) await record.succeed(null, { truncated: true });
    else await record.succeed(resultOf(Buffer.concat(kept, size), type));
  } catch (error) {
    finished = true;
    await record.fail(error);
    throw error;
  } finally {
    // Nobody reads the body any more; a record the store refused is logged by whoever stores it.
    if (!finished) record.cancelled().catch(() => {});
  }
}
