/**
 * Calling an app's function on the run API: synchronously (`run`), queued (`runAsync`) or as a stream of
 * items (`stream`). Every run id a call learns, a failed call's included, is remembered for `getRun(runId)`.
 */
import type { components } from "../generated/api.d.ts";
import type { ClientContext } from "./_client_context.ts";
import { type AppRef, resolveAppRef } from "./app_ref.ts";
import { readEventStream } from "./event_stream.ts";
import { errorFromResponse, type RunplaneError, runIdFrom } from "./runplane_error.ts";
import type { RunOptions, RunResult, RunStream } from "./types.ts";

/** How a call asks for its answer: queued (`async`), and the media type it accepts. */
interface CallMode {
  async?: boolean;
  accept?: string;
}

/** One call of a function: the app (and function) it names, its input and its options. */
interface FunctionCall {
  app: AppRef;
  input: Record<string, unknown> | undefined;
  options: RunOptions;
}

function isEventStream(response: Response): boolean {
  return (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
}

/** The calls of a client's `run`, `runAsync` and `stream`, on its run API. */
export class FunctionCalls {
  readonly #client: ClientContext;

  /** Calls over `client`'s run API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** Calls a function and resolves with its result (a streaming function's items are collected). */
  async run(app: AppRef, input?: Record<string, unknown>, runOptions: RunOptions = {}): Promise<RunResult> {
    const started = performance.now();
    const { response, error } = await this.#callFunction({ app, input, options: runOptions }, {});
    if (!response.ok) throw this.#failed(app, await errorFromResponse(response, error));
    if (!isEventStream(response) || !response.body) {
      const answer = (await response.json()) as RunResult;
      this.#client.knownRuns.remember(answer.run_id, app);
      return answer;
    }
    const runId = runIdFrom(response.headers.get("x-request-id"));
    this.#client.knownRuns.remember(runId, app);
    const items: unknown[] = [];
    for await (const item of readEventStream(response.body, { runId })) items.push(item);
    // A stream's answer has no run_time_ms; the client's own wall time is the closest honest figure.
    return { run_id: runId ?? "", run_time_ms: performance.now() - started, result: items };
  }

  /** Queues a run with an idempotency key (a fresh random one when absent) and resolves with its id. */
  async runAsync(app: AppRef, input?: Record<string, unknown>, runOptions: RunOptions = {}): Promise<string> {
    // A fresh key makes the submission safe to send again: a retry answers with the run the first made.
    const idempotencyKey = runOptions.idempotencyKey ?? crypto.randomUUID();
    const { response, error } = await this.#callFunction({ app, input, options: { ...runOptions, idempotencyKey } }, {
      async: true,
    });
    if (!response.ok) throw this.#failed(app, await errorFromResponse(response, error));
    const body = (await response.json()) as { run_id: string };
    this.#client.knownRuns.remember(body.run_id, app);
    return body.run_id;
  }

  /** Calls a function and yields its items as they arrive; the call starts when iteration does. */
  stream(app: AppRef, input?: Record<string, unknown>, runOptions: RunOptions = {}): RunStream {
    const learnt: { runId?: string } = {};
    return {
      get runId() {
        return learnt.runId;
      },
      [Symbol.asyncIterator]: () => this.#streamItems({ app, input, options: runOptions }, learnt),
    };
  }

  async *#streamItems(call: FunctionCall, learnt: { runId?: string }): AsyncGenerator<unknown, void, undefined> {
    const { response, error } = await this.#callFunction(call, { accept: "text/event-stream" });
    const runId = runIdFrom(response.headers.get("x-request-id"));
    learnt.runId = runId;
    this.#client.knownRuns.remember(runId, call.app);
    if (!response.ok) throw await errorFromResponse(response, error);
    if (!isEventStream(response) || !response.body) {
      // The function returned a plain value: it is the stream's only item.
      yield ((await response.json()) as RunResult).result;
      return;
    }
    yield* readEventStream(response.body, { runId });
  }

  /** Remembers the run a failed call created (a function that raised has one) and returns the error. */
  #failed(app: AppRef, error: RunplaneError): RunplaneError {
    this.#client.knownRuns.remember(error.runId, app);
    return error;
  }

  #callFunction(call: FunctionCall, mode: CallMode) {
    const { input, options } = call;
    const ref = resolveAppRef(call.app);
    return this.#client.runApi.POST("/v4/{project_id}/{app_name}/{function_name}", {
      params: {
        path: { project_id: ref.project, app_name: ref.app, function_name: ref.function },
        query: {
          ...(mode.async ? { async: true } : {}),
          ...(options.webhookEndpoint ? { webhookEndpoint: options.webhookEndpoint } : {}),
          ...(options.rerunOf ? { rerunOf: options.rerunOf } : {}),
        },
        header: {
          ...(mode.accept ? { accept: mode.accept } : {}),
          ...(options.webhookSecret ? { "X-Webhook-Secret": options.webhookSecret } : {}),
          ...(options.idempotencyKey ? { "Idempotency-Key": options.idempotencyKey } : {}),
        },
      },
      // The generated RunInput is Record<string, never> (openapi-typescript does not read the schema's
      // `unevaluatedProperties: {}`); any JSON object is a valid input.
      body: (input ?? {}) as components["schemas"]["RunInput"],
      parseAs: "stream",
      signal: options.signal,
    });
  }
}
