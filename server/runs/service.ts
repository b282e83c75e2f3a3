/**
 * The run service: submits runs (sync, stream, async) with their webhooks and idempotency keys, serves
 * run records, cancels runs, and — when given an executor — dispatches queued async runs.
 */
import { randomBytes } from "node:crypto";
import type { Insertable, Kysely, Transaction } from "kysely";
import type { components } from "../../generated/api.d.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import { createGroupCommit, type Database, isTerminal, type Notifier } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import type { Ticker } from "../ticker/mod.ts";
import {
  checkEndpointUrl,
  type DeliveryHandOff,
  DestinationRefusedError,
  redeliver,
  REDELIVERY_LIMIT,
  takeEndpointCredentials,
  webhookViews,
} from "../webhooks/mod.ts";
import type { RunExecutor } from "./executor.ts";
import { decodeCursor, encodeCursor } from "./_cursor.ts";
import { startDispatcher } from "./_dispatcher.ts";
import { executeRun, type RunExecution } from "./_execute_run.ts";
import { fingerprint, reserveKey } from "./_idempotency.ts";
import { INTERRUPTED, type LocalRuns } from "./_local_runs.ts";
import { startMaintenance } from "./_maintenance.ts";
import { DEFAULT_RETENTION_MS, startRetention } from "./_retention.ts";
import {
  queuedRunsByApp,
  selectReruns,
  selectRun,
  selectRunById,
  selectRunPage,
  selectRunsOf,
} from "./_queries.ts";
import { DEFAULT_RESULT_LIMIT_BYTES } from "./_stored_result.ts";
import { type Run, type RunRow, toRun, toRunSummary } from "./_view.ts";
import { type CheckedWebhook, LiveRunRecord } from "./_live_run.ts";
import { registerOwner } from "./_owners.ts";
import { createRunEvents, type RunMetrics } from "./_run_events.ts";
import { endStoredRun, runEnd } from "./_run_end.ts";
import type { RunChange } from "./change_feed.ts";
import { readRunLog, type RunLog, type RunLogLine, type RunLogWriter } from "./run_logs.ts";
import { insertRun, insertRuns } from "../store/statements/run_rows.ts";
import { createWriteBehind } from "./_write_behind.ts";
import { newRunId } from "./run_id.ts";
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

/** The fields a run is logged with when its process gives it up. */
function toLogFields(row: RunRow): { run_id: string; app: string } {
  return { run_id: row.run_id, app: `${row.project_id}/${row.app_id}` };
}

/** Creates the service and starts its dispatcher (when it has an executor) and upkeep. */
export function createRunService(options: RunServiceOptions): RunService {
  const { db, secrets, logger, config } = options;
  const owner = options.owner ?? `rp_${randomBytes(8).toString("hex")}`;
  const local: LocalRuns = new Map();
  const onDeliveries = options.onDeliveries ?? (() => {});
  const clock = options.now ?? Date.now;
  const notifier = options.notifier;
  const events = createRunEvents(logger, {
    metrics: options.metrics,
    onChange: options.onChange,
    changesWanted: options.changesWanted,
  });
  // Kept after a clean stop too: the next start sees the process is gone and ends what it left running.
  if (options.ownersDir) registerOwner(options.ownersDir, owner);
  const writer = createWriteBehind(db, {
    owner,
    now: clock,
    retryDelaysMs: options.recordRetry?.delaysMs,
    keptRetryMs: options.recordRetry?.keptMs,
    onDeliveries,
    handOff: options.deliveryHandOff,
    onError(error, runId) {
      if (options.storeOutage?.refused(error)) return;
      logger.error({ err: error, run_id: runId }, "run record could not be stored; kept in memory and retried");
    },
    onLost: (error, runId) =>
      logger.error({ err: error, run_id: runId }, "run record lost: the store refused it until it was given up"),
    // A run ends once: another process ended this one first (a lease rescue while this one was blocked).
    onDropped: (runId, { dropped, stored }) =>
      logger.warn({
        run_id: runId,
        dropped_status: dropped.status,
        dropped_error_type: dropped.error_type ?? null,
        stored_status: stored.status,
        stored_error_type: stored.error_type,
        stored_completed_at: stored.completed_at === null ? null : Number(stored.completed_at),
        rescued_from: stored.swept_owner,
      }, "run was ended elsewhere before it finished here; its outcome is dropped"),
  });
  const resultLimitBytes = config.resultLimitBytes ?? DEFAULT_RESULT_LIMIT_BYTES;
  const liveRunDeps = { writer, local, events, resultLimitBytes, now: clock };
  const loops: Ticker[] = [];
  let dispatcher: Ticker | undefined;
  if (options.executor && options.dispatch !== false) {
    dispatcher = startDispatcher({
      db,
      executor: options.executor,
      logger,
      owner,
      leaseMs: config.runLeaseMs,
      local,
      events,
      resultLimitBytes,
      pollMs: options.pollMs ?? 250,
      onFinished() {
        onDeliveries();
        dispatcher?.wake();
      },
      now: clock,
    });
    loops.push(dispatcher);
  }
  loops.push(
    startMaintenance({
      db,
      logger,
      events,
      owner,
      ownersDir: options.ownersDir,
      leaseMs: config.runLeaseMs,
      resultTtlMs: config.resultTtlMs,
      local,
      onDeliveries,
      now: clock,
    }),
  );
  loops.push(startRetention({
    db,
    logger,
    retentionMs: config.runRetentionMs ?? DEFAULT_RETENTION_MS,
    resultTtlMs: config.resultTtlMs,
    now: clock,
  }));
  const unlisten: Array<() => void> = [];
  if (notifier) {
    // Another process queued a run: claim it now if there is room, rather than at the next poll.
    // A wake-up names the process that queued the runs; that one woke its own dispatcher already
    // (`accepted`), and a wake-up per accepted batch would cost it a queue scan per batch.
    if (dispatcher) {
      unlisten.push(notifier.listen("runplane_runs", (from) => {
        if (from !== owner) dispatcher?.wake();
      }));
    }
    // Another process was asked to cancel a run this one runs. A lost wake-up is caught by the next
    // lease renewal, which reads `cancel_requested`.
    unlisten.push(notifier.listen("runplane_cancel", (runId) => {
      if (runId) local.get(runId)?.cancel();
    }));
  }

  /** Announces committed queued runs to every process (inside `trx`: sent on its commit). */
  async function announceQueued(trx: Transaction<Database>): Promise<void> {
    await notifier?.notify("runplane_runs", owner, { db: trx });
  }

  // Accepted async runs: the 202 follows the commit of the run's record, and the records of calls
  // accepted in the same turn of the event loop share one commit.
  // One batch at a time: the next one collects while one commits, so under load one statement (one
  // round trip and one commit on PostgreSQL) carries many records. The wake-up follows the commit; the
  // 202s do not wait for it (a lost one only leaves the runs to the next poll).
  const queued = createGroupCommit<Insertable<RunTable>>(async (rows) => {
    await insertRuns(db, rows);
    notifier?.notify("runplane_runs", owner).catch((error) => logger.warn({ err: error }, "queued runs not announced"));
  }, { maxInFlight: 1 });

  function checkWebhook(call: RunCall): CheckedWebhook | null {
    if (!call.webhook) return null;
    try {
      const url = checkEndpointUrl(call.webhook.endpoint, { allowPrivate: config.webhookAllowPrivate });
      const credentials = takeEndpointCredentials(url);
      return {
        endpoint: url.href,
        sealed: call.webhook.secret ? secrets.seal(call.webhook.secret) : null,
        credentials: credentials === null ? null : secrets.seal(credentials),
      };
    } catch (error) {
      if (!(error instanceof DestinationRefusedError)) throw error;
      throw new ProblemError("validation", error.message, {
        errors: [{ path: "query.webhookEndpoint", message: error.message }],
      });
    }
  }

  async function view(row: RunRow): Promise<Run> {
    const [webhooks, reruns] = await Promise.all([
      row.webhook_endpoint ? webhookViews(db, [row.run_id]) : new Map(),
      selectReruns(db, row.run_id),
    ]);
    return toRun(row, {
      webhook: webhooks.get(row.run_id) ?? null,
      resultTtlMs: config.resultTtlMs,
      now: clock(),
      reruns,
    });
  }

  /** A `rerunOf` must name a run of the same app (400 otherwise). */
  async function checkRerunOf(call: RunCall): Promise<void> {
    await writer.flush();
    const found = await selectRun(db, { projectId: call.projectId, appId: call.app, runId: call.rerunOf! });
    if (!found) {
      throw new ProblemError("validation", `rerunOf names no run of ${call.projectId}/${call.app}: ${call.rerunOf}`, {
        errors: [{ path: "query.rerunOf", message: "must be a run of this app" }],
      });
    }
  }

  async function existingRun(call: RunCall, runId: string): Promise<Submission> {
    await writer.flush();
    const row = await selectRunById(db, runId);
    if (row?.mode === "async") return { kind: "accepted", runId, replayed: true };
    if (!row || !isTerminal(row.status)) {
      throw new ProblemError(
        "conflict",
        "A call with this Idempotency-Key is still running; retry after it has finished",
        { runId },
      );
    }
    if (row.project_id !== call.projectId || row.app_id !== call.app) {
      throw new Error(`Idempotency key bound to run ${runId} of another app`);
    }
    return { kind: "replay", run: await view(row) };
  }

  /** The run's first record: `queued` for an async call, `running` (leased here) for a live one. */
  function firstRow(call: RunCall, webhook: CheckedWebhook | null): Insertable<RunTable> {
    // The store's clock: run ids and times order runs across processes, whatever each host's clock says.
    const now = clock();
    const live = call.mode !== "async";
    // One literal, not `{ ...base, status, … }`: on Node 20 each property after a spread costs ~0.5 µs.
    // A live run's input stays in memory (its caller holds it until it ends). Its webhook secret and
    // credentials are stored sealed, as an async run's are: when its process stops before it ends (drain
    // timeout, kill -9), whoever ends it `interrupted` sends its webhook signed and authorised too.
    return {
      run_id: newRunId(now),
      project_id: call.projectId,
      app_id: call.app,
      function_name: call.functionName,
      mode: call.mode,
      created_at: now,
      webhook_endpoint: webhook?.endpoint ?? null,
      rerun_of: call.rerunOf ?? null,
      status: live ? "running" : "queued",
      started_at: live ? now : null,
      queue_time_ms: live ? 0 : null,
      input_json: live ? null : call.inputJson ?? JSON.stringify(call.input),
      webhook_secret: webhook?.sealed ?? null,
      webhook_credentials: webhook?.credentials ?? null,
      // A live run is leased here from its start; a queued one by whoever claims it.
      lease_owner: live ? owner : null,
      lease_expires_at: live ? now + config.runLeaseMs : null,
    };
  }

  /** Tells a queued run's creation (a live run's start tells its creation). */
  function created(row: Insertable<RunTable>): void {
    events.created({
      runId: row.run_id,
      projectId: row.project_id,
      appId: row.app_id,
      functionName: row.function_name,
      mode: row.mode,
      status: row.status,
      createdAt: row.created_at,
    });
  }

  /** An accepted async run, once its record is committed: wakes the dispatcher when the app has room. */
  async function accepted(call: RunCall, runId: string): Promise<Submission> {
    // Waking the dispatcher scans the queue; when the app has no free slot, the run waits for the
    // slot's release (which wakes the dispatcher) or the next poll anyway.
    if (dispatcher && (await options.executor!.freeSlots({ projectId: call.projectId, app: call.app })) > 0) {
      dispatcher.wake();
    }
    return { kind: "accepted", runId, replayed: false };
  }

  /** Queues an async call: its record is committed (grouped with others of the same turn) before the 202. */
  async function acceptAsync(call: RunCall, webhook: CheckedWebhook | null): Promise<Submission> {
    const row = firstRow(call, webhook);
    await queued.add(row);
    created(row);
    return await accepted(call, row.run_id);
  }

  /** Starts a sync or stream run without a key: its record is buffered, not awaited. */
  function startLive(call: RunCall, webhook: CheckedWebhook | null): Submission {
    const row = firstRow(call, webhook);
    // A call that ends within the batch window is written once, finished (an insert: see `create`).
    writer.create(row);
    return { kind: "live", run: new LiveRunRecord(liveRunDeps, call, row, webhook) };
  }

  /**
   * Submits a call with an `Idempotency-Key`: the key is reserved and the run's first record inserted in
   * one transaction; a key already used answers from its run (or refuses a different request).
   */
  async function submitWithKey(call: RunCall, webhook: CheckedWebhook | null, key: string): Promise<Submission> {
    const row = firstRow(call, webhook);
    const print = fingerprint({
      app: call.app,
      function: call.functionName,
      mode: call.mode,
      input: call.input,
      webhook: webhook?.endpoint ?? null,
    });
    const reservation = await db.transaction().execute(async (trx) => {
      const found = await reserveKey(trx, {
        projectId: call.projectId,
        key,
        fingerprint: print,
        runId: row.run_id,
        now: row.created_at,
      });
      if (found.fresh) {
        await insertRun(trx, row);
        if (call.mode === "async") await announceQueued(trx);
      }
      return found;
    });
    if (!reservation.fresh) {
      if (reservation.fingerprint !== print) {
        throw new ProblemError(
          "unprocessable",
          "This Idempotency-Key was used with a different request; use a new key for a new request",
          { runId: reservation.runId },
        );
      }
      return await existingRun(call, reservation.runId);
    }
    if (call.mode === "async") {
      created(row);
      return await accepted(call, row.run_id);
    }
    return { kind: "live", run: new LiveRunRecord(liveRunDeps, call, row, webhook) };
  }

  async function submit(call: RunCall): Promise<Submission> {
    if (options.storeOutage?.refusesWrites) {
      throw new ProblemError(
        "store-unavailable",
        "The store (the server's database) cannot write now (its disk is full), so no run starts; retry after a few seconds",
        { headers: { "Retry-After": "2" } },
      );
    }
    const webhook = checkWebhook(call);
    if (call.rerunOf !== undefined) await checkRerunOf(call);
    if (call.idempotencyKey !== undefined) return await submitWithKey(call, webhook, call.idempotencyKey);
    if (call.mode === "async") return await acceptAsync(call, webhook);
    return startLive(call, webhook);
  }

  async function execute(call: RunCall, executeOptions: ExecuteOptions = {}): Promise<Execution> {
    const { executor } = options;
    if (!executor) throw new Error("This run service has no executor; give createRunService one to execute calls");
    const submission = await submit(call);
    if (submission.kind !== "live") return submission;
    executeOptions.onLive?.(submission.run);
    return await executeRun(executor, {
      projectId: call.projectId,
      app: call.app,
      functionName: call.functionName,
      input: call.input,
      inputJson: call.inputJson,
    }, submission.run);
  }

  async function findRun(ref: RunRef): Promise<RunRow> {
    await writer.flush();
    const row = await selectRun(db, ref);
    if (!row) {
      throw new ProblemError("not-found", `No run ${ref.runId} in app ${ref.appId}; check the run id and app name`);
    }
    return row;
  }

  /** Waits (polling the store) until `ref` has ended, or `timeoutMs` passed. */
  async function untilEnded(ref: RunRef, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const row = await selectRun(db, ref);
      if (!row || isTerminal(row.status)) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async function cancelRun(ref: RunRef): Promise<Run> {
    const row = await findRun(ref);
    if (isTerminal(row.status)) {
      throw new ProblemError(
        "conflict",
        `Run ${ref.runId} already ended with status ${row.status}; only queued or running runs can be cancelled`,
        {
          runId: ref.runId,
        },
      );
    }
    const here = local.get(ref.runId);
    if (here) {
      here.cancel();
      await here.done;
    } else if (row.status === "queued") {
      const end = runEnd(row, { status: "cancelled" }, { now: clock() });
      const ended = await endStoredRun({ db, events }, end, { from: ["queued"] });
      if (!ended) return await cancelRun(ref);
      onDeliveries();
    } else {
      // Running in another process: ask it (the flag survives a lost wake-up; its lease renewal reads
      // it), wake it, and give it a moment to stop the function and record `cancelled`.
      const asked = await db.updateTable("runs").set({ cancel_requested: 1 }).where("run_id", "=", ref.runId).where(
        "status",
        "=",
        "running",
      ).executeTakeFirst();
      if (Number(asked.numUpdatedRows) === 1) {
        await notifier?.notify("runplane_cancel", ref.runId);
        await untilEnded(ref, options.remoteCancelWaitMs ?? 3_000);
      }
    }
    logger.info({ run_id: ref.runId, was: row.status }, "run cancelled");
    return await view(await findRun(ref));
  }

  async function redeliverWebhook(ref: RunRef): Promise<Run> {
    const row = await findRun(ref);
    if (!isTerminal(row.status)) {
      throw new ProblemError("conflict", `Run ${ref.runId} is ${row.status}; its webhook is delivered when it ends`, {
        runId: ref.runId,
      });
    }
    const now = clock();
    const outcome = await redeliver(db, { runId: ref.runId, now, expiredBefore: now - config.resultTtlMs });
    if (!outcome.ok && outcome.reason === "rate-limited") {
      const seconds = Math.max(1, Math.ceil(outcome.retryAfterMs / 1000));
      const { burst, intervalMs } = REDELIVERY_LIMIT;
      throw new ProblemError(
        "too-many-requests",
        `Run ${ref.runId}'s webhook was redelivered too often (${60_000 / intervalMs} redeliveries a minute per run: `
          + `${burst} at once, then one every ${intervalMs / 1000} s); try again in ${seconds} s`,
        { runId: ref.runId, headers: { "Retry-After": String(seconds) } },
      );
    }
    if (!outcome.ok) {
      const why = {
        "no-webhook": `Run ${ref.runId} was called without a webhookEndpoint: there is nothing to deliver`,
        "in-progress": `Run ${ref.runId}'s webhook is being delivered now; wait for its attempts to end`,
        expired: `Run ${ref.runId}'s result has expired, and its webhook's secret with it (RUNPLANE_RESULT_TTL)`,
      }[outcome.reason];
      throw new ProblemError("conflict", why, { runId: ref.runId });
    }
    logger.info({ run_id: ref.runId }, "webhook redelivery queued");
    onDeliveries();
    return await view(await findRun(ref));
  }

  async function getRunLog(ref: RunRef): Promise<RunLog> {
    await findRun(ref);
    await options.logs?.flush();
    const { lines, truncated } = await readRunLog(db, { runId: ref.runId });
    return { lines: lines.map(({ seq: _seq, ...line }) => line), truncated };
  }

  async function followRunLog(ref: RunRef, signal: AbortSignal) {
    await findRun(ref);
    return (async function*(): AsyncGenerator<RunLogLine | { end: string }> {
      let after = 0;
      while (!signal.aborted) {
        const { status } = await findRun(ref);
        await options.logs?.flush();
        const { lines } = await readRunLog(db, { runId: ref.runId, afterSeq: after, limit: 1000 });
        for (const { seq, ...line } of lines) {
          after = seq;
          yield line;
        }
        // The status was read before the lines, and the writer flushed: once ended, every line is in.
        if (isTerminal(status) && lines.length < 1000) {
          yield { end: status };
          return;
        }
        if (lines.length < 1000) await new Promise((resolve) => setTimeout(resolve, 250));
      }
    })();
  }

  /** One page of runs: the written-behind ones first stored, one more row read to know of a next page. */
  async function listPage(where: ListProjectRunsOptions & { projectId: string }): Promise<RunPage> {
    await writer.flush();
    const { cursor, limit = 50, ...filters } = where;
    const rows = await selectRunPage(db, {
      ...filters,
      before: cursor === undefined ? undefined : decodeCursor(cursor),
      limit: limit + 1,
    });
    const page = rows.slice(0, limit);
    const withWebhook = page.filter((r) => r.webhook_endpoint).map((r) => r.run_id);
    const webhooks = await webhookViews(db, withWebhook);
    const now = clock();
    return {
      runs: page.map((row) =>
        toRunSummary(row, { webhook: webhooks.get(row.run_id) ?? null, resultTtlMs: config.resultTtlMs, now })
      ),
      next_cursor: rows.length > limit ? encodeCursor(page[page.length - 1].run_id) : null,
    };
  }

  return {
    submit,
    execute,
    redeliverWebhook,
    getRunLog,
    followRunLog,
    async getRun(ref) {
      return await view(await findRun(ref));
    },
    async listRuns(app, listOptions = {}) {
      return await listPage({ ...listOptions, projectId: app.projectId, appId: app.appId });
    },
    async listProjectRuns(projectId, listOptions = {}) {
      return await listPage({ ...listOptions, projectId });
    },
    cancelRun,
    async queuedByApp() {
      return await queuedRunsByApp(db);
    },
    flush: () => writer.flush(),
    async stopDispatching() {
      await dispatcher?.stop();
    },
    async settled(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      while (local.size > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
      return local.size;
    },
    async abandon() {
      // A live run ends through its own record (its secret, its caller's log line, one end told); then
      // the runs only the store knows as this process's (async runs, live ones already gone) end there.
      const live = [...local.values()].filter((run): run is LiveRunRecord =>
        run instanceof LiveRunRecord && !run.ended
      );
      // A refused record is kept and retried by the writer, which logs it: nobody answers here.
      const liveEnds = live.map((run) => run.interrupt().catch(() => {}));
      await writer.flush();
      await Promise.all(liveEnds);
      const rows = await selectRunsOf(db, owner);
      let ended = live.length;
      const now = clock();
      for (const row of rows) {
        const end = runEnd(row, { status: "failure", error: INTERRUPTED }, { now });
        const reported = await endStoredRun({ db, events }, end, { from: ["running"], owner });
        if (reported) ended++;
      }
      const interrupted = [...live.map((run) => run.logFields()), ...rows.map((row) => toLogFields(row))];
      for (const fields of interrupted) logger.warn(fields, "run interrupted: the server stopped before it finished");
      if (ended) onDeliveries();
      return ended;
    },
    async stop() {
      for (const stopListening of unlisten) stopListening();
      await Promise.all(loops.map((loop) => loop.stop()));
      await writer.close();
    },
  };
}
