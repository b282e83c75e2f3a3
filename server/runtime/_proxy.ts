/** Forwards a call to a custom runtime over HTTP and turns its answer into a call outcome. */
import { EventSourceParserStream } from "eventsource-parser/stream";
import { type Dispatcher, fetch as undiciFetch } from "undici";
import type { AbortSignalLike } from "../abort/mod.ts";
import { type Deadline, startDeadline } from "../deadline/mod.ts";
import { DestinationRefusedError, type GuardOptions } from "../webhooks/mod.ts";
import { outOfMemory, RunFailure } from "./_failures.ts";
import { guardedPost } from "./_guarded_fetch.ts";
import type { CallOutcome, HttpCall, StreamItem } from "./_outcome.ts";
import { MAX_MESSAGE_BYTES } from "./_worker_protocol.ts";

/** An answer from a custom runtime the server will not hold: a body or one event over the message limit. */
function tooLarge(runId: string, what: string): RunFailure {
  return new RunFailure(
    "upstream_error",
    `The app's server sent ${what} larger than ${MAX_MESSAGE_BYTES / 1024 / 1024} MiB; answer less, or stream it`,
    { runId },
  );
}

/** The body as text, refusing to hold more than `MAX_MESSAGE_BYTES` of it. */
export async function boundedText(body: ReadableStream<Uint8Array> | null, runId: string): Promise<string> {
  if (!body) return "";
  const parts: Uint8Array[] = [];
  let size = 0;
  const reader = body.getReader();
  for (let next = await reader.read(); !next.done; next = await reader.read()) {
    size += next.value.length;
    if (size > MAX_MESSAGE_BYTES) {
      await reader.cancel().catch(() => undefined);
      throw tooLarge(runId, "a body");
    }
    parts.push(next.value);
  }
  return Buffer.concat(parts).toString("utf8");
}

/** Passes bytes through, failing once a line (an event's field) grows past `MAX_MESSAGE_BYTES`. */
function boundedLines(runId: string): TransformStream<Uint8Array, Uint8Array> {
  let open = 0;
  return new TransformStream({
    transform(chunk, controller) {
      const last = chunk.lastIndexOf(10);
      open = last < 0 ? open + chunk.length : chunk.length - last - 1;
      if (open > MAX_MESSAGE_BYTES) controller.error(tooLarge(runId, "an event"));
      else controller.enqueue(chunk);
    },
  });
}

/** What to forward. */
export interface ProxyCall {
  runId: string;
  /** The path after the app: the function name. */
  path: string;
  input: unknown;
  /** `input` as the JSON text the caller sent, forwarded as is. */
  inputJson?: string;
  graceMs: number;
  signal?: AbortSignalLike;
  /** Called once when the upstream exchange is over (answer read, failed or aborted). */
  onSettled(): void;
  /** How to reach the upstream (a replica's relay socket); the default network when absent. */
  dispatcher?: Dispatcher;
  /**
   * The destination rules of a deployed app's external url, checked at every call before connecting
   * (see `_guarded_fetch.ts`); none for the platform's own replicas and the operator's apps.
   */
  guard?: GuardOptions;
  /** The replica's memory limit when the kernel killed it at that limit (see `Upstream.oomLimit`). */
  oomLimit?(): number | undefined;
  /** A call by another method than POST, passed through as HTTP (`proxyHttpCall`). */
  http?: HttpCall;
}

/** The run's failure for what broke a forwarded call (a deadline, an abort, the app's server gone…). */
export function failureFor(error: unknown, call: ProxyCall, deadline: Deadline): RunFailure {
  if (error instanceof RunFailure) return error;
  if (error instanceof DestinationRefusedError) {
    return new RunFailure(
      "upstream_error",
      `The app's runtime.custom.url was not called: ${error.message}; deployed apps may only reach public addresses (the operator's RUNPLANE_WEBHOOK_ALLOW_PRIVATE lifts this)`,
      { runId: call.runId },
    );
  }
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
  // The app's server was killed at its memory limit: the broken connection says no more than that.
  const limit = call.oomLimit?.();
  if (limit !== undefined) return outOfMemory(call.runId, limit);
  const cause = (error as { cause?: { message?: string } }).cause?.message ?? (error as Error).message;
  return new RunFailure("upstream_error", `The app's server failed during the call: ${cause}`, { runId: call.runId });
}

async function* events(body: ReadableStream<Uint8Array>, runId: string): AsyncGenerator<StreamItem> {
  const reader = body.pipeThrough(boundedLines(runId)).pipeThrough(
    new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>,
  )
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
    const url = `${baseUrl}/${call.path}`;
    const headers = {
      "content-type": "application/json",
      "x-request-id": call.runId,
      accept: "application/json, text/event-stream",
    };
    const body = call.inputJson ?? JSON.stringify(call.input ?? {});
    // A redirect is the upstream's answer, never followed: it could point the server anywhere. A
    // replica's relay socket is reached with undici's own fetch (a dispatcher of its own version).
    const response = call.guard
      ? await guardedPost(new URL(url), { headers, body, signal, guard: call.guard })
      : call.dispatcher
      ? await (undiciFetch as unknown as typeof fetch)(url, {
        method: "POST",
        headers,
        body,
        signal,
        redirect: "manual",
        dispatcher: call.dispatcher,
      } as RequestInit)
      : await fetch(url, { method: "POST", headers, body, signal, redirect: "manual" });
    const type = response.headers.get("content-type")?.split(";")[0].trim().toLowerCase() ?? "";
    if (!response.ok) {
      const text = (await boundedText(response.body, call.runId)).slice(0, 500);
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
      return { kind: "stream", items: guarded(events(response.body, call.runId), call, deadline, done), startedAt };
    }
    const text = await boundedText(response.body, call.runId);
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
