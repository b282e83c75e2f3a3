/** Forwards a call to a custom runtime over HTTP and turns its answer into a call outcome. */
import { EventSourceParserStream } from "eventsource-parser/stream";
import type { AbortSignalLike } from "../abort/mod.ts";
import { type Deadline, startDeadline } from "../deadline/mod.ts";
import { RunFailure } from "./_failures.ts";
import type { CallOutcome, StreamItem } from "./_outcome.ts";

/** What to forward. */
export interface ProxyCall {
  runId: string;
  /** The path after the app: the function name. */
  path: string;
  input: unknown;
  graceMs: number;
  signal?: AbortSignalLike;
  /** Called once when the upstream exchange is over (answer read, failed or aborted). */
  onSettled(): void;
}

function failureFor(error: unknown, call: ProxyCall, deadline: Deadline): RunFailure {
  if (error instanceof RunFailure) return error;
  if (deadline.timedOut) {
    return new RunFailure(
      "timeout",
      `The app did not answer within its response_grace_period (${call.graceMs / 1000} s)`,
      { runId: call.runId },
    );
  }
  if (call.signal?.aborted) {
    return new RunFailure("interrupted", "The run was interrupted before it finished", { runId: call.runId });
  }
  const cause = (error as { cause?: { message?: string } }).cause?.message ?? (error as Error).message;
  return new RunFailure("upstream_error", `The app's server failed during the call: ${cause}`, { runId: call.runId });
}

async function* events(body: ReadableStream<Uint8Array>): AsyncGenerator<StreamItem> {
  const reader = body.pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>)
    .pipeThrough(new EventSourceParserStream()).getReader();
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value.event && value.event !== "message"
        ? { value: value.data, event: value.event }
        : { value: value.data };
    }
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}

async function* guarded(
  items: AsyncIterable<StreamItem>,
  call: ProxyCall,
  deadline: Deadline,
  done: () => void,
): AsyncGenerator<StreamItem> {
  try {
    for await (const item of items) yield item;
  } catch (error) {
    throw failureFor(error, call, deadline);
  } finally {
    done();
  }
}

/**
 * POSTs `input` as JSON to `<baseUrl>/<path>` with `X-Request-Id`. A 2xx `text/event-stream` answer
 * becomes a stream of its events, another 2xx answer a result (JSON parsed, other text as a string);
 * anything else is an `upstream_error`.
 */
export async function proxyCall(baseUrl: string, call: ProxyCall): Promise<CallOutcome> {
  const startedAt = performance.now();
  const deadline = startDeadline(call.graceMs, { signal: call.signal });
  const signal = deadline.signal;
  let settled = false;
  const done = () => {
    if (settled) return;
    settled = true;
    deadline.clear();
    call.onSettled();
  };
  try {
    const response = await fetch(`${baseUrl}/${call.path}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-request-id": call.runId,
        accept: "application/json, text/event-stream",
      },
      body: JSON.stringify(call.input ?? {}),
      signal,
    });
    const type = response.headers.get("content-type")?.split(";")[0].trim().toLowerCase() ?? "";
    if (!response.ok) {
      const text = (await response.text()).slice(0, 500);
      throw new RunFailure("upstream_error", `The app's server answered ${response.status}: ${text || "(no body)"}`, {
        runId: call.runId,
      });
    }
    if (type === "text/event-stream" && response.body) {
      // A reader that never starts (the client left at once) must still free the slot.
      signal.addEventListener("abort", () => {
        void response.body?.cancel().catch(() => undefined);
        done();
      }, { once: true });
      return { kind: "stream", items: guarded(events(response.body), call, deadline, done), startedAt };
    }
    const text = await response.text();
    let result: unknown = text;
    if (type.endsWith("json")) {
      try {
        result = JSON.parse(text);
      } catch {
        throw new RunFailure("upstream_error", `The app's server answered ${type} that is not valid JSON`, {
          runId: call.runId,
        });
      }
    }
    done();
    return { kind: "result", result, runTimeMs: performance.now() - startedAt };
  } catch (error) {
    done();
    throw failureFor(error, call, deadline);
  }
}
