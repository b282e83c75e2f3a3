/**
 * Reading a run's server-sent-event stream: each `data` event is one item the function yielded (JSON
 * parsed, plain text as a string); an `event: error` ends the stream with a `RunplaneError`.
 */
import { EventSourceParserStream } from "eventsource-parser/stream";
import { type Problem, RunplaneError } from "./runplane_error.ts";

/** One item as the server sent it: JSON when it parses as JSON, else the text itself. */
export function parseStreamItem(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return data;
  }
}

/**
 * Yields the items of an event-stream `body` until it ends. Leaving the loop early (or aborting the
 * request's signal) cancels the body, which closes the connection and so the server's generator.
 * `runId` is put on the error of an `event: error` that carries none.
 */
export async function* readEventStream(
  body: ReadableStream<Uint8Array>,
  options: { runId?: string } = {},
): AsyncGenerator<unknown, void, undefined> {
  for await (const { event, data } of readServerEvents(body)) {
    if (event === "error") throw streamError(data, options.runId);
    if (event === "message" || event === "data") yield parseStreamItem(data);
  }
}

/**
 * Yields each event of an event-stream `body` as sent: its name (`message` when it has none) and its
 * data. Leaving the loop early cancels the body.
 */
export async function* readServerEvents(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<{ event: string; data: string }, void, undefined> {
  const decoder = new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>;
  const events = body.pipeThrough(decoder).pipeThrough(new EventSourceParserStream());
  const reader = events.getReader();
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) return;
      yield { event: value.event ?? "message", data: value.data };
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

function streamError(data: string, runId: string | undefined): RunplaneError {
  const parsed = parseStreamItem(data) as Partial<Problem> | string;
  const problem: Problem = typeof parsed === "object" && parsed !== null && typeof parsed.title === "string"
    ? (parsed as Problem)
    : { type: "about:blank", title: "The stream failed", status: 500, detail: String(data) };
  return new RunplaneError(problem, { runId });
}
