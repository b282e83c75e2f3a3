/**
 * The run service's public types: what it does (`RunService`), what it needs (`RunServiceOptions`,
 * `RunSettings`) and what its calls take and answer. `service.ts` re-exports them.
 */
import type { AppLogLine, AppLogOptions, AppLogPage, AppRef, AppStats, AppStatsWindow } from "./app_insights.ts";
import type { Kysely } from "kysely";
import type { components } from "../../generated/api.d.ts";
import type { Logger } from "../log.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import type { DeliveryHandOff } from "../webhooks/mod.ts";
import type { RunChange } from "./change_feed.ts";
import type { RunExecutor } from "./executor.ts";
import type { RunExecution } from "./_execute_run.ts";
import type { RunMetrics } from "./_run_events.ts";
import type { Run } from "./_view.ts";
import type { RunLog, RunLogLine, RunLogWriter } from "./run_logs.ts";
import type { LiveRun, RunCall } from "./run_call.ts";

/** The contract's `RunPage`. */
export type RunPage = components["schemas"]["RunPage"];

/** What `submit` did. */
export type Submission =
  /** An async run was queued and committed (or an idempotent retry found the original one). */
  | { kind: "accepted"; runId: string; replayed: boolean }
  /** An idempotent retry of a finished sync or stream call: answer from the stored run. */
  | { kind: "replay"; run: Run }
  /** A sync or stream run to execute now. */
  | { kind: "live"; run: LiveRun };

/** What `execute` did: an async run accepted, an idempotent replay, or a live run's recorded execution. */
export type Execution = Exclude<Submission, { kind: "live" }> | RunExecution;

/** Options of `execute`. */
export interface ExecuteOptions {
  /**
   * Called with a sync or stream run once it exists, before its function is called: e.g. to put it in
   * the caller's log line, or to abort it when the caller goes away.
   */
  onLive?(run: LiveRun): void;
}

/** Which run. */
export interface RunRef {
  projectId: string;
  appId: string;
  runId: string;
}

/** Options of `listRuns`. */
export interface ListRunsOptions {
  status?: Run["status"];
  limit?: number;
  cursor?: string;
}

/** Options of `listProjectRuns`: those of `listRuns` and more filters, each narrowing the list. */
export interface ListProjectRunsOptions extends ListRunsOptions {
  appId?: string;
  functionName?: string;
  mode?: Run["mode"];
  /** Unix ms: only runs created at or after it. */
  createdAfter?: number;
  /** Unix ms: only runs created before it. */
  createdBefore?: number;
}

/** The run service. */
export interface RunService {
  /**
   * Submits a call. Checks the webhook endpoint (400 problem when malformed, not http(s) or a literal
   * private address), seals the webhook secret, and applies `Idempotency-Key` (422 problem when the key
   * was used with another request, 409 while the first sync call still runs).
   *
   * - `async`: the `queued` record is committed before this resolves with `accepted`; the dispatcher
   *   runs it when the app has a free slot. Answer 202 with `X-Request-Id` = run id.
   * - `sync`/`stream`: resolves with `live` at once (no store write on the way unless an idempotency key
   *   asks for one): call the function with `run.signal`, then `item()`/`succeed()` or `fail()` exactly
   *   once. The record is written behind, in batches; the webhook leaves after the final state is stored.
   * - `replay`: a finished idempotent sync call; answer from `run` (its `result` or `error`).
   */
  submit(call: RunCall): Promise<Submission>;
  /**
   * Submits a call and, for a sync or stream call, executes it through the executor and records it:
   * a result is recorded before this resolves (reject: the failure, recorded); a stream is recorded as
   * its `items` are read (see `RunExecution`). Needs an executor.
   */
  execute(call: RunCall, options?: ExecuteOptions): Promise<Execution>;
  /** One run; a 404 problem when the app has no such run. */
  getRun(ref: RunRef): Promise<Run>;
  /** An app's runs, newest first; a 400 problem for a cursor this server did not make. */
  listRuns(app: { projectId: string; appId: string }, options?: ListRunsOptions): Promise<RunPage>;
  /** A project's runs in all its apps, newest first, filtered; a 400 problem for a cursor this server did not make. */
  listProjectRuns(projectId: string, options?: ListProjectRunsOptions): Promise<RunPage>;
  /**
   * Cancels a run: queued → `cancelled` at once; running here → interrupted and `cancelled`; running in
   * another process → asked to stop (a wake-up on `runplane_cancel`, and its next lease renewal): it ends
   * `cancelled` within a second or so, which this waits for (up to `remoteCancelWaitMs`). 404 / 409
   * problems.
   */
  cancelRun(ref: RunRef): Promise<Run>;
  /**
   * Delivers a finished run's webhook once more, through the outbox, signed as the first delivery was;
   * resolves with the run (its delivery `pending` again). 409 problems: the run has not ended, it had no
   * webhook, a delivery is under way, or its result (and so the sealed secret) has expired.
   */
  redeliverWebhook(ref: RunRef): Promise<Run>;
  /** The run's captured output so far; 404 for an unknown run. */
  getRunLog(ref: RunRef): Promise<RunLog>;
  /**
   * The run's output line by line as it is written (from the first line), then `{ end }` with the run's
   * status once it has ended; stops early when `signal` aborts.
   */
  followRunLog(ref: RunRef, signal: AbortSignal): Promise<AsyncIterable<RunLogLine | { end: string }>>;
  /** A page of every run's lines of an app, interleaved, from `since` (default an hour ago) or after `cursor`. */
  getAppLog(app: AppRef, options?: AppLogOptions): Promise<AppLogPage>;
  /** The app's lines from `since` on, then each line any process writes, until `options.signal` aborts. */
  followAppLog(app: AppRef, options: AppLogOptions & { signal: AbortSignal }): AsyncIterable<AppLogLine>;
  /** The app's runs by outcome, p50/p95 run time, replicas and starts, per bucket of the last hour or day. */
  getAppStats(app: AppRef, window: AppStatsWindow): Promise<AppStats>;
  /** Queued runs per app, from the store (for the `runplane_runs_queued` gauge). */
  queuedByApp(): Promise<Array<{ projectId: string; appId: string; count: number }>>;
  /** Writes buffered sync records now. */
  flush(): Promise<void>;
  /** Stops claiming queued runs (draining); runs already executing here go on. */
  stopDispatching(): Promise<void>;
  /** Resolves with 0 once no run executes in this process, or with how many still do after `timeoutMs`. */
  settled(timeoutMs: number): Promise<number>;
  /**
   * Ends every run this process still runs as `failure`/`interrupted` (with its webhook queued), as a
   * restart would, so that a stop past the drain timeout loses nothing. Later outcomes of those runs
   * are ignored.
   */
  abandon(): Promise<number>;
  /**
   * Stops dispatching and upkeep, writes buffered records (and tries once more those the store refused,
   * logging any still refused as lost). Runs in flight end as `interrupted` later.
   */
  stop(): Promise<void>;
}

/** The settings of the run service, as the server's configuration names them. */
export interface RunSettings {
  /** How long a finished run keeps its result. */
  resultTtlMs: number;
  /** How long a finished run's record is kept before it is deleted (default 30 days). */
  runRetentionMs?: number;
  /** How long a run's lease lasts without renewal before another process may end it. */
  runLeaseMs: number;
  /** Whether webhook endpoints may be private addresses. */
  webhookAllowPrivate: boolean;
  /** The largest result stored (and sent in a webhook), in JSON bytes; default 1 MiB. */
  resultLimitBytes?: number;
}

/** What the run service needs. */
export interface RunServiceOptions {
  db: Kysely<Database>;
  secrets: SecretBox;
  logger: Logger;
  /** The settings runs follow (the server passes its `Config`, which has these keys). */
  config: RunSettings;
  /** Executes calls (`execute`) and queued async runs; without one, async runs stay queued (e.g. a submit-only process). */
  executor?: RunExecutor;
  /**
   * Whether this process claims queued async runs and runs them (default true). A host's workers
   * (`RUNPLANE_WORKERS` > 1) leave that to its supervisor, and use `executor` for their sync calls only.
   */
  dispatch?: boolean;
  /** Where run starts and ends are counted; without it they are only logged. */
  metrics?: RunMetrics;
  /** Where the runtime's output lines are collected (the run logs); without it logs are read only. */
  logs?: RunLogWriter;
  /** Told each run's creation, start and end (the live pages' feed). */
  onChange?(change: RunChange): void;
  /** Whether `onChange` takes the changes of a project's runs now (default: always); skips building the others. */
  changesWanted?(projectId: string): boolean;
  /** Called when deliveries were added to the outbox: wake the delivery worker. */
  onDeliveries?(): void;
  /** The delivery worker's hand-off: deliveries of sync and stream runs go to it without a claim. */
  deliveryHandOff?: DeliveryHandOff;
  /**
   * The store's outage record: while the store cannot write (a full disk) no run starts (a sync call
   * answers 503 `store-unavailable` before its function runs, rather than 200 with no record), and a
   * record the write-behind could not store counts toward the outage instead of logging a line per run.
   */
  storeOutage?: { readonly refusesWrites: boolean; refused(error: unknown): boolean };
  /** This process's lease owner id; give the delivery worker the same one so its leases are freed with the runs'. */
  owner?: string;
  /**
   * A folder where this process records its lease owner id and pid, shared by the processes of this
   * host that share the store (`runOwnersDir`): upkeep ends the runs of a dead one at once instead of
   * after their lease, and leaves a live one's runs to it when its lease ran out (it was blocked from the
   * store, not gone).
   */
  ownersDir?: string;
  /**
   * Wake-ups between processes sharing the store: a committed async run is announced on
   * `runplane_runs` (idle processes claim it at once), a cancel of a run running elsewhere on
   * `runplane_cancel` (with its id); this process listens to both. Without it, polling and lease
   * renewal alone carry them.
   */
  notifier?: Pick<Notifier, "notify" | "listen">;
  /** The store's clock, which decides leases (default the process's); see `Store.clock`. */
  now?: () => number;
  /** How long `cancelRun` waits for a run running in another process to end before answering (default 3 s). */
  remoteCancelWaitMs?: number;
  /** Dispatcher poll interval when nothing woke it (default 250 ms). */
  pollMs?: number;
  /**
   * How a run record the store refused is retried: `delaysMs` before each retry while a caller waits
   * (default 20, 100, 500 ms), then in the background from `keptMs` on (default 1 s, doubling to 5 s).
   */
  recordRetry?: { delaysMs?: readonly number[]; keptMs?: number };
}
