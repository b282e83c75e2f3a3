/**
 * The async dispatcher: claims queued runs from the store (per app, oldest first, only as many as the
 * app has free slots), runs each through the executor bounded by the app's grace period, and writes the
 * final state together with its webhook delivery.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";
import { type RunExecutor, toRunError } from "./executor.ts";
import { type LocalRuns, RunCancelled, RunTimedOut, untilAborted } from "./_local_runs.ts";
import { appsWithQueuedRuns, claimQueuedRuns, finishRun, type RunOutcome } from "./_queries.ts";
import type { RunEvents } from "./_run_events.ts";
import { type StoredResult, StoredItems, storedResult } from "./_stored_result.ts";
import type { RunRow } from "./_view.ts";

/** The default `response_grace_period`, and the most any app may set. */
export const DEFAULT_GRACE_MS = 900_000;
export const MAX_GRACE_MS = 12 * 3_600_000;

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
}

async function collect(
  items: AsyncIterable<unknown>,
  options: { signal: AbortSignal; limitBytes: number },
): Promise<StoredResult> {
  const stored = new StoredItems(options.limitBytes);
  for await (const item of items) {
    if (options.signal.aborted) throw options.signal.reason;
    stored.add(item);
  }
  return stored.result();
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return value !== null && typeof value === "object" && Symbol.asyncIterator in value;
}

/** Starts dispatching; `wake()` after queueing a run, `stop()` on close. */
export function startDispatcher(options: DispatcherOptions): Ticker {
  const { db, executor, logger } = options;

  function outcomeOf(error: unknown): RunOutcome {
    if (error instanceof RunCancelled) return { status: "cancelled" };
    if (error instanceof RunTimedOut) {
      return { status: "failure", error: { type: "timeout", message: error.message, traceback: null } };
    }
    return { status: "failure", error: toRunError(error) };
  }

  async function execute(row: RunRow, controller: AbortController): Promise<void> {
    const target = { projectId: row.project_id, app: row.app_id };
    // Called before any await so the executor counts this run when the next app is looked at.
    const running = executor.execute({
      ...target,
      functionName: row.function_name,
      input: JSON.parse(row.input_json ?? "{}") as Record<string, unknown>,
      inputJson: row.input_json ?? undefined,
      runId: row.run_id,
      signal: controller.signal,
    });
    running.catch(() => {});
    const graceMs = Math.min((await executor.gracePeriodMs(target)) ?? DEFAULT_GRACE_MS, MAX_GRACE_MS);
    const timer = setTimeout(() => controller.abort(new RunTimedOut(graceMs)), graceMs);
    // The worker keeps a live server busy; the deadline alone must not hold a stopping process open.
    timer.unref();
    let outcome: RunOutcome;
    try {
      const value = await untilAborted(running, controller.signal);
      const limitBytes = options.resultLimitBytes;
      const result = isAsyncIterable(value)
        ? await untilAborted(collect(value, { signal: controller.signal, limitBytes }), controller.signal)
        : storedResult(value, limitBytes);
      outcome = { status: "success", result };
    } catch (error) {
      outcome = outcomeOf(controller.signal.aborted ? controller.signal.reason : error);
    } finally {
      clearTimeout(timer);
    }
    const now = Date.now();
    const written = await finishRun(db, row, { outcome, from: ["running"], owner: options.owner, now });
    if (!written) {
      logger.warn({ run_id: row.run_id }, "run was ended elsewhere before it finished here; its outcome is dropped");
      return;
    }
    options.events.finished({
      runId: row.run_id,
      projectId: row.project_id,
      appId: row.app_id,
      functionName: row.function_name,
      mode: row.mode,
      status: outcome.status,
      runTimeMs: Math.max(0, now - Number(row.started_at ?? now)),
      errorType: outcome.status === "failure" ? outcome.error.type : null,
      queueTimeMs: row.queue_time_ms === null ? null : Number(row.queue_time_ms),
    });
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
      const free = await executor.freeSlots({ projectId: app.project_id, app: app.app_id });
      if (free <= 0) continue;
      const claimed = await claimQueuedRuns(db, {
        projectId: app.project_id,
        appId: app.app_id,
        owner: options.owner,
        leaseMs: options.leaseMs,
        limit: Math.floor(free),
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
