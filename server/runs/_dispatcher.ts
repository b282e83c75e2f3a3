/**
 * The async dispatcher: claims queued runs from the store (per app, oldest first, only as many as the
 * app has free slots), executes each (`executeRun`) bounded by the app's grace period, and writes the
 * final state together with its webhook delivery (`QueuedRunRecord`) — or puts a run that could not start
 * for a passing reason of the platform's back on the queue, and claims none of its app's runs for a
 * pause, so that a reason that has not passed yet cannot spin the queue.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";
import type { AppTarget, RunExecutor } from "./executor.ts";
import { executeRun } from "./_execute_run.ts";
import { type LocalRuns, RunCancelled, RunTimedOut, untilAborted } from "./_local_runs.ts";
import { appsWithQueuedRuns, claimQueuedRuns } from "./_queries.ts";
import { createLeasedFinishes } from "./_leased_finishes.ts";
import { putBackOnQueue, QueuedRunRecord } from "./_queued_run.ts";
import { endStoredRun, runEnd } from "./_run_end.ts";
import type { RunEvents } from "./_run_events.ts";
import type { RunRow } from "./_view.ts";

/** The default `response_grace_period`, and the most any app may set. */
export const DEFAULT_GRACE_MS = 900_000;
export const MAX_GRACE_MS = 12 * 3_600_000;

/** How long this process claims no runs of an app after it put one back on the queue (default). */
export const REQUEUE_PAUSE_MS = 1_000;

/** What the dispatcher needs. */
export interface DispatcherOptions {
  db: Kysely<Database>;
  executor: RunExecutor;
  logger: Logger;
  /** This process's lease owner id. */
  owner: string;
  leaseMs: number;
  local: LocalRuns;
  events: RunEvents;
  pollMs: number;
  /** The largest result stored (and sent in the webhook), in JSON bytes. */
  resultLimitBytes: number;
  /** Called after a run's final state (and delivery) was committed. */
  onFinished(): void;
  /** The store's clock, which decides leases (default the process's). */
  now?: () => number;
  /** How long no run of an app is claimed here after one was put back on the queue (default 1 s). */
  requeuePauseMs?: number;
}

/** An app's key in the dispatcher's maps. */
function appKey(projectId: string, appId: string): string {
  return `${projectId}/${appId}`;
}

/** The app's grace period in milliseconds (the default for an app the executor does not know), capped. */
async function gracePeriod(executor: RunExecutor, target: AppTarget): Promise<number> {
  return Math.min((await executor.gracePeriodMs(target)) ?? DEFAULT_GRACE_MS, MAX_GRACE_MS);
}

/** Reads a stream to its end (each item is recorded as it passes); stops at the signal's abort. */
async function drain(items: AsyncIterable<unknown>, signal: AbortSignal): Promise<void> {
  for await (const _ of items) if (signal.aborted) throw signal.reason;
}

/** Starts dispatching; `wake()` after queueing a run, `stop()` on close. */
export function startDispatcher(options: DispatcherOptions): Ticker {
  const { db, executor, logger } = options;
  const finishes = createLeasedFinishes(db, options.owner, {
    onRetry: (error, runId) =>
      logger.error({ run_id: runId, err: error }, "the end of an async run could not be stored; trying again"),
  });

  // Apps this process put a run of back on the queue, and until when (monotonic clock) it claims none
  // of their runs: another process may take them meanwhile; this one tries again after the pause.
  const paused = new Map<string, number>();
  const pauseMs = options.requeuePauseMs ?? REQUEUE_PAUSE_MS;

  async function requeue(row: RunRow, signal: AbortSignal): Promise<boolean> {
    // Paused from now, not from when the store has it back: while it is being put back, the slot it
    // freed must not go to a run queued after it (its place is kept).
    const key = appKey(row.project_id, row.app_id);
    paused.set(key, performance.now() + pauseMs);
    const putBack = await putBackOnQueue(db, {
      runId: row.run_id,
      owner: options.owner,
      generation: Number(row.lease_generation),
    });
    if (!putBack) {
      paused.delete(key);
      return false;
    }
    paused.set(key, performance.now() + pauseMs);
    if (signal.aborted && signal.reason instanceof RunCancelled) {
      // Cancelled while it was being put back: it is queued now, and ends as a queued run's cancel does.
      const end = runEnd({ ...row, started_at: null }, { status: "cancelled" }, { now: (options.now ?? Date.now)() });
      await endStoredRun({ db, events: options.events }, end, { from: ["queued"] });
    }
    return true;
  }

  async function execute(row: RunRow, controller: AbortController): Promise<void> {
    const target = { projectId: row.project_id, app: row.app_id };
    // Asked first (it awaits nothing before it asks): the executor's call below still precedes any await.
    const grace = gracePeriod(executor, target).catch(() => DEFAULT_GRACE_MS);
    const record = new QueuedRunRecord(row, {
      ...options,
      finishes,
      signal: controller.signal,
      now: options.now ?? Date.now,
      requeue: () => requeue(row, controller.signal),
      graceMs: grace,
    });
    // Called before any await so the executor counts this run when the next app is looked at.
    const running = executeRun(executor, {
      ...target,
      functionName: row.function_name,
      input: JSON.parse(row.input_json ?? "{}") as Record<string, unknown>,
      inputJson: row.input_json ?? undefined,
    }, record);
    running.catch(() => {});
    const graceMs = await grace;
    const timer = setTimeout(() => controller.abort(new RunTimedOut(graceMs)), graceMs);
    // The worker keeps a live server busy; the deadline alone must not hold a stopping process open.
    timer.unref();
    try {
      const execution = await untilAborted(running, controller.signal);
      if (execution.kind === "stream") await untilAborted(drain(execution.items, controller.signal), controller.signal);
    } catch (error) {
      // Settles with the outcome already being written, if any: a run is recorded once.
      await record.fail(error);
    } finally {
      clearTimeout(timer);
    }
  }

  function start(row: RunRow): void {
    const controller = new AbortController();
    const done = execute(row, controller)
      .catch((error) => logger.error({ run_id: row.run_id, err: error }, "async run could not be recorded"))
      .finally(() => {
        options.local.delete(row.run_id);
        options.onFinished();
      });
    options.local.set(row.run_id, { cancel: () => controller.abort(new RunCancelled()), done });
  }

  async function dispatch(): Promise<void> {
    for (const app of await appsWithQueuedRuns(db)) {
      const key = appKey(app.project_id, app.app_id);
      if ((paused.get(key) ?? 0) > performance.now()) continue;
      paused.delete(key);
      const free = await executor.freeSlots({ projectId: app.project_id, app: app.app_id });
      if (free <= 0) continue;
      const claimed = await claimQueuedRuns(db, {
        projectId: app.project_id,
        appId: app.app_id,
        owner: options.owner,
        leaseMs: options.leaseMs,
        limit: Math.floor(free),
        now: options.now?.(),
      });
      for (const row of claimed) {
        options.events.started({
          runId: row.run_id,
          projectId: row.project_id,
          appId: row.app_id,
          functionName: row.function_name,
          mode: row.mode,
          queueTimeMs: Number(row.queue_time_ms ?? 0),
        });
        start(row);
      }
    }
  }

  return startTicker(dispatch, {
    intervalMs: options.pollMs,
    onError: (error) => logger.error({ err: error }, "dispatching queued runs failed"),
  });
}
