/**
 * The run service: submits runs (sync, stream, async) with their webhooks and idempotency keys, serves
 * run records, cancels runs, and — when given an executor — dispatches queued async runs.
 */
import { randomBytes } from "node:crypto";
import type { AbortSignalLike } from "../abort/mod.ts";
import type { Insertable, Kysely } from "kysely";
import type { components } from "../../generated/api.d.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import { createGroupCommit, type Database } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import type { Ticker } from "../ticker/mod.ts";
import {
  checkEndpointUrl,
  type DeliveryHandOff,
  DestinationRefusedError,
  takeEndpointCredentials,
  webhookViews,
} from "../webhooks/mod.ts";
import type { RunExecutor } from "./executor.ts";
import { decodeCursor, encodeCursor } from "./_cursor.ts";
import { startDispatcher } from "./_dispatcher.ts";
import { fingerprint, reserveKey } from "./_idempotency.ts";
import type { LocalRuns } from "./_local_runs.ts";
import { INTERRUPTED, startMaintenance } from "./_maintenance.ts";
import { finishRun, queuedRunsByApp, selectRun, selectRunById, selectRunPage, TERMINAL_STATUSES } from "./_queries.ts";
import { DEFAULT_RESULT_LIMIT_BYTES } from "./_stored_result.ts";
import { type Run, type RunRow, toRun, toRunSummary } from "./_view.ts";
import { type CheckedWebhook, LiveRunRecord } from "./_live_run.ts";
import { registerOwner } from "./_owners.ts";
import { createRunEvents, type RunMetrics } from "./_run_events.ts";
import { insertRun } from "./_run_rows.ts";
import { createWriteBehind } from "./_write_behind.ts";
import { newRunId } from "./run_id.ts";

/** The contract's `RunPage`. */
export type RunPage = components["schemas"]["RunPage"];

/** How a run is called. */
export type RunMode = "sync" | "async" | "stream";

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
}

/** A sync or stream run the caller executes itself and reports on. */
export interface LiveRun {
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
   * retries: answer it instead of the result (the record is kept and retried in the background).
   */
  succeed(result?: unknown, options?: { runTimeMs?: number }): Promise<void>;
  /**
   * Records failure (`error` is read by `toRunError`: `errorType`, `message`, `traceback`) — or
   * `cancelled` once `signal` was aborted (the caller went away, or `cancelRun`); settles like `succeed`.
   */
  fail(error: unknown): Promise<void>;
  /** Records the run `cancelled` (e.g. its stream's client went away), as `cancelRun` does; settles like `succeed`. */
  cancelled(): Promise<void>;
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

/** What `submit` did. */
export type Submission =
  /** An async run was queued and committed (or an idempotent retry found the original one). */
  | { kind: "accepted"; runId: string; replayed: boolean }
  /** An idempotent retry of a finished sync or stream call: answer from the stored run. */
  | { kind: "replay"; run: Run }
  /** A sync or stream run to execute now. */
  | { kind: "live"; run: LiveRun };

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
  /** One run; a 404 problem when the app has no such run. */
  getRun(ref: RunRef): Promise<Run>;
  /** An app's runs, newest first; a 400 problem for a cursor this server did not make. */
  listRuns(app: { projectId: string; appId: string }, options?: ListRunsOptions): Promise<RunPage>;
  /**
   * Cancels a run: queued → `cancelled` at once; running here → interrupted and `cancelled`; running in
   * another process → asked to stop (it ends `cancelled` within a lease period). 404 / 409 problems.
   */
  cancelRun(ref: RunRef): Promise<Run>;
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
  /** Runs queued async runs; without one, async runs stay queued (e.g. a submit-only process). */
  executor?: RunExecutor;
  /** Where run starts and ends are counted; without it they are only logged. */
  metrics?: RunMetrics;
  /** Called when deliveries were added to the outbox: wake the delivery worker. */
  onDeliveries?(): void;
  /** The delivery worker's hand-off: deliveries of sync and stream runs go to it without a claim. */
  deliveryHandOff?: DeliveryHandOff;
  /** This process's lease owner id; give the delivery worker the same one so its leases are freed with the runs'. */
  owner?: string;
  /**
   * A folder in the data dir where this process records its lease owner id and pid, so that a restart
   * ends the runs of a dead process of this host at once instead of after their lease.
   */
  ownersDir?: string;
  /** Dispatcher poll interval when nothing woke it (default 250 ms). */
  pollMs?: number;
  /**
   * How a run record the store refused is retried: `delaysMs` before each retry while a caller waits
   * (default 20, 100, 500 ms), then in the background from `keptMs` on (default 1 s, doubling to 30 s).
   */
  recordRetry?: { delaysMs?: readonly number[]; keptMs?: number };
}

/** Creates the service and starts its dispatcher (when it has an executor) and upkeep. */
export function createRunService(options: RunServiceOptions): RunService {
  const { db, secrets, logger, config } = options;
  const owner = options.owner ?? `rp_${randomBytes(8).toString("hex")}`;
  const local: LocalRuns = new Map();
  const onDeliveries = options.onDeliveries ?? (() => {});
  const events = createRunEvents(logger, options.metrics);
  // Kept after a clean stop too: the next start sees the process is gone and ends what it left running.
  if (options.ownersDir) registerOwner(options.ownersDir, owner);
  const writer = createWriteBehind(db, {
    retryDelaysMs: options.recordRetry?.delaysMs,
    keptRetryMs: options.recordRetry?.keptMs,
    onDeliveries,
    handOff: options.deliveryHandOff,
    onError: (error, runId) =>
      logger.error({ err: error, run_id: runId }, "run record could not be stored; kept in memory and retried"),
    onLost: (error, runId) =>
      logger.error({ err: error, run_id: runId }, "run record lost: the store refused it until it was given up"),
  });
  const resultLimitBytes = config.resultLimitBytes ?? DEFAULT_RESULT_LIMIT_BYTES;
  const liveRunDeps = { writer, local, events, resultLimitBytes };
  const loops: Ticker[] = [];
  let dispatcher: Ticker | undefined;
  if (options.executor) {
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
    }),
  );

  // Accepted async runs: the 202 follows the commit of the run's record, and the records of calls
  // accepted in the same turn of the event loop share one commit.
  const queued = createGroupCommit<Insertable<RunTable>>((rows) =>
    db.transaction().execute(async (trx) => {
      for (const row of rows) await insertRun(trx, row);
    })
  );

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
    const webhooks = row.webhook_endpoint ? await webhookViews(db, [row.run_id]) : new Map();
    return toRun(row, { webhook: webhooks.get(row.run_id) ?? null, resultTtlMs: config.resultTtlMs, now: Date.now() });
  }

  async function existingRun(call: RunCall, runId: string): Promise<Submission> {
    await writer.flush();
    const row = await selectRunById(db, runId);
    if (row?.mode === "async") return { kind: "accepted", runId, replayed: true };
    if (!row || !(TERMINAL_STATUSES as readonly string[]).includes(row.status)) {
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

  async function submit(call: RunCall): Promise<Submission> {
    const webhook = checkWebhook(call);
    const now = Date.now();
    const runId = newRunId(now);
    const running = call.mode !== "async";
    const row: Insertable<RunTable> = {
      run_id: runId,
      project_id: call.projectId,
      app_id: call.app,
      function_name: call.functionName,
      mode: call.mode,
      status: running ? "running" : "queued",
      created_at: now,
      started_at: running ? now : null,
      queue_time_ms: running ? 0 : null,
      input_json: running ? null : call.inputJson ?? JSON.stringify(call.input),
      webhook_endpoint: webhook?.endpoint ?? null,
      webhook_secret: running ? null : webhook?.sealed ?? null,
      webhook_credentials: running ? null : webhook?.credentials ?? null,
      lease_owner: running ? owner : null,
      lease_expires_at: running ? now + config.runLeaseMs : null,
    };
    if (call.idempotencyKey === undefined && !running) {
      await queued.add(row);
      if (dispatcher && (await options.executor!.freeSlots({ projectId: call.projectId, app: call.app })) > 0) {
        dispatcher.wake();
      }
      return { kind: "accepted", runId, replayed: false };
    }
    if (call.idempotencyKey !== undefined || !running) {
      const key = call.idempotencyKey;
      const print = fingerprint({
        app: call.app,
        function: call.functionName,
        mode: call.mode,
        input: call.input,
        webhook: webhook?.endpoint ?? null,
      });
      const reservation = await db.transaction().execute(async (trx) => {
        const found = key === undefined
          ? { fresh: true as const }
          : await reserveKey(trx, { projectId: call.projectId, key, fingerprint: print, runId, now });
        if (found.fresh) await insertRun(trx, row);
        return found;
      });
      if (!reservation.fresh) {
        if (reservation.fingerprint !== print) {
          throw new ProblemError(
            "unprocessable",
            "This Idempotency-Key was used with a different request; use a new key for a new request",
            {
              runId: reservation.runId,
            },
          );
        }
        return await existingRun(call, reservation.runId);
      }
      if (!running) {
        // Waking the dispatcher scans the queue; when the app has no free slot, the run waits for
        // the slot's release (which wakes the dispatcher) or the next poll anyway.
        if (dispatcher && (await options.executor!.freeSlots({ projectId: call.projectId, app: call.app })) > 0) {
          dispatcher.wake();
        }
        return { kind: "accepted", runId, replayed: false };
      }
    }
    // Buffered, not awaited: a call that ends within the batch window is written once, finished.
    if (call.idempotencyKey === undefined) writer.put(row);
    return { kind: "live", run: new LiveRunRecord(liveRunDeps, call, row, webhook) };
  }

  async function findRun(ref: RunRef): Promise<RunRow> {
    await writer.flush();
    const row = await selectRun(db, ref);
    if (!row) {
      throw new ProblemError("not-found", `No run ${ref.runId} in app ${ref.appId}; check the run id and app name`);
    }
    return row;
  }

  async function cancelRun(ref: RunRef): Promise<Run> {
    const row = await findRun(ref);
    if ((TERMINAL_STATUSES as readonly string[]).includes(row.status)) {
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
      const ended = await finishRun(db, row, { outcome: { status: "cancelled" }, from: ["queued"] });
      if (!ended) return await cancelRun(ref);
      onDeliveries();
      events.finished({
        runId: row.run_id,
        projectId: row.project_id,
        appId: row.app_id,
        functionName: row.function_name,
        mode: row.mode,
        status: "cancelled",
        runTimeMs: null,
      });
    } else {
      await db.updateTable("runs").set({ cancel_requested: 1 }).where("run_id", "=", ref.runId).where(
        "status",
        "=",
        "running",
      ).execute();
    }
    logger.info({ run_id: ref.runId, was: row.status }, "run cancelled");
    return await view(await findRun(ref));
  }

  return {
    submit,
    async getRun(ref) {
      return await view(await findRun(ref));
    },
    async listRuns(app, listOptions = {}) {
      await writer.flush();
      const limit = listOptions.limit ?? 50;
      const rows = await selectRunPage(db, {
        projectId: app.projectId,
        appId: app.appId,
        status: listOptions.status,
        before: listOptions.cursor === undefined ? undefined : decodeCursor(listOptions.cursor),
        limit: limit + 1,
      });
      const page = rows.slice(0, limit);
      const withWebhook = page.filter((r) => r.webhook_endpoint).map((r) => r.run_id);
      const webhooks = await webhookViews(db, withWebhook);
      const now = Date.now();
      return {
        runs: page.map((row) =>
          toRunSummary(row, { webhook: webhooks.get(row.run_id) ?? null, resultTtlMs: config.resultTtlMs, now })
        ),
        next_cursor: rows.length > limit ? encodeCursor(page[page.length - 1].run_id) : null,
      };
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
      await writer.flush();
      const rows = await db.selectFrom("runs").selectAll().where("lease_owner", "=", owner).where(
        "status",
        "=",
        "running",
      ).execute();
      let ended = 0;
      for (const row of rows) {
        if (
          await finishRun(db, row, { outcome: { status: "failure", error: INTERRUPTED }, from: ["running"], owner })
        ) ended++;
        logger.warn(
          { run_id: row.run_id, app: `${row.project_id}/${row.app_id}` },
          "run interrupted: the server stopped before it finished",
        );
      }
      if (ended) onDeliveries();
      return ended;
    },
    async stop() {
      await Promise.all(loops.map((loop) => loop.stop()));
      await writer.close();
    },
  };
}
