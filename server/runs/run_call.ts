/**
 * The shapes of a call and of a run its caller executes: shared by the run service, the live run record
 * and the step that executes a run, so none of them imports another for its types.
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import type { HttpRequestPart } from "./executor.ts";
import type { RunMode } from "../store/mod.ts";

export type { RunMode };

/** Options of `RunRecorder.succeed`. */
export interface SucceedOptions {
  /** The run time the caller is answered (see `LiveRun.succeed`). */
  runTimeMs?: number;
  /** The result was too large to keep (a passed-through body past what is held): stored as truncated. */
  truncated?: boolean;
}

/** A call to submit. */
export interface RunCall {
  projectId: string;
  app: string;
  functionName: string;
  mode: RunMode;
  /** The JSON body: the function's named parameters. */
  input: Record<string, unknown>;
  /** `input` as the JSON text the caller sent: an async run stores it and hands it to its function as is. */
  inputJson?: string;
  /** `webhookEndpoint` and `X-Webhook-Secret`, when the call has them. */
  webhook?: { endpoint: string; secret?: string };
  /** `Idempotency-Key`, when the call has one. */
  idempotencyKey?: string;
  /** The run of the same app this call runs again (`rerunOf`). */
  rerunOf?: string;
  /**
   * A call of a custom runtime's route by another method than POST (`functionName` is its path): passed
   * to the app as HTTP, recorded with its method. Sync only: no webhook, no idempotency key.
   */
  http?: HttpRequestPart;
}

/**
 * What a run reports to while it executes (see `executeRun`): a live run's record, or a queued run's.
 * Only the first of `succeed`, `fail` and `cancelled` counts; later ones settle like it.
 */
export interface RunRecorder {
  readonly runId: string;
  /** Aborted when the run is cancelled, times out or loses its caller: stop the worker. */
  readonly signal: AbortSignalLike;
  /** Marks a call whose function turned out to stream. */
  streaming(): void;
  /** Records the deployment whose replica took the call (its `deployment_id`). */
  servedBy(deploymentId: string): void;
  /** Adds one streamed item; `succeed()` without a value then records the list. */
  item(value: unknown): void;
  /** Records success with `result` (for a stream, default: the items so far). */
  succeed(result?: unknown, options?: SucceedOptions): Promise<void>;
  /** Records failure, or the reason the run's signal was aborted with. */
  fail(error: unknown): Promise<void>;
  /** Records the run `cancelled` (e.g. nobody reads its stream any more). */
  cancelled(): Promise<void>;
}

/** A sync or stream run the caller executes itself and reports on. */
export interface LiveRun extends RunRecorder {
  runId: string;
  /** Aborted when the run is cancelled (`cancelRun`) or by `abort` (e.g. the caller went away): stop the worker. */
  signal: AbortSignalLike;
  /** Interrupts the run (e.g. its caller went away): aborts `signal` with `reason`. */
  abort(reason: unknown): void;
  /** Marks a sync call whose function turned out to stream: recorded with mode `stream`. */
  streaming(): void;
  /** Adds one streamed item; `succeed()` without a value then records the list. */
  item(value: unknown): void;
  /**
   * Records success with `result` (for a stream, default: the items so far). Resolves once the record is
   * durable enough to answer: at once, or — for a call with a webhook — once the final state and its
   * delivery are committed, so a crash after the answer cannot lose the webhook. Await it before answering.
   * `runTimeMs` is the run time the caller is answered; it is recorded as is, so the record, the webhook
   * and an idempotent replay say the same (default: from the run's start to now, in whole milliseconds).
   * Rejects with a 503 `service-unavailable` problem (with the run id) when that commit failed after
   * retries: answer it instead of the result (the record is kept and retried in the background); with a
   * 409 `interrupted` (or `conflict`) problem when another process ended the run first (a lease rescue
   * while this one was blocked): its outcome was dropped, answer the problem.
   */
  succeed(result?: unknown, options?: SucceedOptions): Promise<void>;
  /**
   * Records the outcome `error` stands for (`classifyFailure`: a failure with its `errorType`, `message`
   * and `traceback`, or `cancelled` once `signal` was aborted: the caller went away, or `cancelRun`);
   * settles like `succeed`.
   */
  fail(error: unknown): Promise<void>;
  /** Records the run `cancelled` (e.g. its stream's client went away), as `cancelRun` does; settles like `succeed`. */
  cancelled(): Promise<void>;
  /**
   * For a WebSocket run: `read` gives its counters and close (the contract's `WebSocketCounters`), asked
   * once when the run ends, whichever way it ends (a cancel included), and stored with that end.
   */
  countWebSocket(read: () => WebSocketCounters): void;
  /** Whether it has ended (`succeed`, `fail` or a cancel). */
  readonly ended: boolean;
  /** Settles once it has ended. */
  readonly done: Promise<void>;
  /**
   * What the caller's request log line says of the run (its `run finished` line is debug-only):
   * `run_id`, `app` (`project/app`), `function`, `mode`, `run_status`, `run_time_ms`, `queue_time_ms`,
   * `error_type`. Final once `ended`.
   */
  logFields(): RunLogFields;
}

/** A WebSocket run's traffic and close, as the contract's `WebSocketCounters` says. */
export interface WebSocketCounters {
  messages_in: number;
  messages_out: number;
  bytes_in: number;
  bytes_out: number;
  close_code: number | null;
  close_reason: string;
  closed_by: "caller" | "app" | "server";
}

/** What a sync or stream run adds to its caller's log line. */
export interface RunLogFields {
  [field: string]: unknown;
  run_id: string;
  app: string;
  function: string;
  mode: string;
  run_status: string;
  run_time_ms: number | null;
  queue_time_ms: number;
  error_type: string | null;
}
