// @ts-check
/**
 * Reads the answer of a function called with `Accept: text/event-stream`, with `eventsource-parser` (the
 * parser the client and the server's proxy use): each item exactly as the function yielded it (an item's
 * own leading spaces kept), and every problem said as one: a refusal before the stream (a 404, a 422),
 * the `event: error` that ends a failed stream, a line the parser could not read, a stream that broke off.
 */
import { EventSourceParserStream } from "eventsource-parser/stream";
import { isProblem, problemText } from "./api.js";

/**
 * What a reader is told.
 *
 * @typedef {object} StreamHandlers
 * @property {(data: string, event: string | undefined) => void} onItem an item: its `data:` lines' text
 * @property {(text: string) => void} onProblem what went wrong, in a sentence
 * @property {(value: unknown) => void} onResult the whole answer of a function that returned a value
 */

/**
 * The problem an `event: error` carries, in a sentence.
 *
 * @param {string} data
 */
function streamProblem(data) {
  let problem;
  try {
    problem = JSON.parse(data);
  } catch {
    return `The stream ended with an error: ${data}`;
  }
  return isProblem(problem) ? problemText(problem, undefined) : `The stream ended with an error: ${data}`;
}

/**
 * Reads `answer` (openapi-fetch's, with `parseAs: "stream"`) to its end; resolves with whether it ended
 * without a problem.
 *
 * @param {{ data?: ReadableStream<Uint8Array> | null; error?: unknown; response: Response }} answer
 * @param {StreamHandlers} handlers
 * @returns {Promise<boolean>}
 */
export async function readCallStream(answer, handlers) {
  const { response } = answer;
  if (!response.ok) {
    handlers.onProblem(problemText(answer.error, response));
    return false;
  }
  const body = answer.data ?? response.body;
  if (!body) {
    handlers.onProblem("The server answered with no body");
    return false;
  }
  const decoder = /** @type {ReadableWritablePair<string, Uint8Array>} */ (
    /** @type {unknown} */ (new TextDecoderStream())
  );
  const text = body.pipeThrough(decoder);
  if (!(response.headers.get("Content-Type") ?? "").startsWith("text/event-stream")) {
    // A function that returned a value rather than a generator answers JSON.
    let whole = "";
    for (const reader = text.getReader();;) {
      const { done, value } = await reader.read();
      if (done) break;
      whole += value;
    }
    handlers.onResult(JSON.parse(whole));
    return true;
  }
  let clean = true;
  const events = text.pipeThrough(
    new EventSourceParserStream({
      onError(error) {
        clean = false;
        handlers.onProblem(`The stream had a line that is not server-sent events: ${error.message}`);
      },
    }),
  ).getReader();
  try {
    for (;;) {
      const { done, value } = await events.read();
      if (done) return clean;
      if (value.event === "error") {
        handlers.onProblem(streamProblem(value.data));
        clean = false;
      } else handlers.onItem(value.data, value.event);
    }
  } catch (error) {
    handlers.onProblem(`The stream broke off: ${error instanceof Error ? error.message : String(error)}`);
    return false;
  }
}
