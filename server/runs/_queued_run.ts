/**
 * The record of an async run the dispatcher executes: what `executeRun` reports to. Its outcome is
 * written once, to the store, with its webhook delivery, from this process's lease — unless the run could
 * not start for a reason of the platform's that passes (`classifyFailure`: no replica may run it here now,
 * no host took it, the store refused), found before its function started: then it is put back on the
 * queue with its place (its run id) kept, to be tried again, until its deadline (its app's
 * `response_grace_period` after it was accepted) has passed; then it ends `failure` with that reason's
 * type (`service_unavailable`, `store_unavailable`).
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import { type Database, storeUnavailableReason } from "../store/mod.ts";
import { requeueLeasedRun } from "../store/statements/run_requeue.ts";
import { classifyFailure, type RunErrorInfo } from "./failure_outcome.ts";
import type { LeasedFinishes } from "./_leased_finishes.ts";
import { RunCancelled } from "./_local_runs.ts";
import type { RunOutcome } from "./_queries.ts";
import type { RunEvents } from "./_run_events.ts";
import { endLeasedRun, runEnd } from "./_run_end.ts";
import { StoredItems, storedResult } from "./_stored_result.ts";
import type { RunRecorder, SucceedOptions } from "./run_call.ts";
import type { RunRow } from "./_view.ts";

/** What a queued run's record writes to. */
export interface QueuedRunDeps {
  /** Ends runs still leased to this process, in shared commits. */
  finishes: LeasedFinishes;
  events: RunEvents;
  logger: Logger;
  /** The largest result stored (and sent in the webhook), in JSON bytes. */
  resultLimitBytes: number;
  /** The store's clock: the run's `completed_at`. */
  now(): number;
  /**
   * Puts the run back on the queue from this process's lease (`putBackOnQueue`); false when it is no
   * longer this process's to put back (ended elsewhere) or a cancel was asked for it.
   */
  requeue(runId: string): Promise<boolean>;
  /** The app's `response_grace_period` in milliseconds (never rejects): the run is tried again within it. */
  graceMs: Promise<number>;
}

/** The failure of a run the platform could not start before its deadline: the reason's own type. */
function pastDeadline(reason: RunErrorInfo, graceMs: number): RunOutcome {
  return {
    status: "failure",
    error: {
      type: reason.type,
      message: `The run could not start within its app's response_grace_period (${
        Math.round(graceMs / 1000)
      } s after it was accepted), though it was tried again until then: ${reason.message}`,
      traceback: null,
    },
  };
}

/** The first pause before a put-back refused by the store is tried again; it doubles up to the last. */
const FIRST_PUT_BACK_RETRY_MS = 100;
const MAX_PUT_BACK_RETRY_MS = 5_000;

/** Which holding of a run `putBackOnQueue` puts back: the owner's lease, in the generation it claimed. */
export interface LeasedRunRef {
  runId: string;
  owner: string;
  generation: number;
}

/**
 * Puts a run back on the queue if it is still `running` under `owner`'s lease in `generation` and no
 * cancel was asked for it; its run id (its place in the queue) stays. Resolves with whether it did.
 */
export async function putBackOnQueue(db: Kysely<Database>, where: LeasedRunRef): Promise<boolean> {
  const { rows } = await requeueLeasedRun(db, [where.runId, where.owner, where.generation]);
  return rows.length === 1;
}

/** A claimed async run's record; the first outcome reported is the one written. */
export class QueuedRunRecord implements RunRecorder {
  readonly runId: string;
  readonly signal: AbortSignal;
  readonly #row: RunRow;
  readonly #deps: QueuedRunDeps;
  #items: StoredItems | undefined = undefined;
  #ending: Promise<void> | undefined = undefined;
  #deploymentId: string | undefined = undefined;
  /** A replica took the call (its function is about to run or ran): the run can no longer be put back. */
  #started = false;
  /** When it was claimed, on the monotonic clock: its run time is measured there. */
  readonly #startedAt = performance.now();

  constructor(row: RunRow, deps: QueuedRunDeps & { signal: AbortSignal }) {
    this.runId = row.run_id;
    this.signal = deps.signal;
    this.#row = row;
    this.#deps = deps;
  }

  /** An async run keeps its mode when its function streams: the items are stored as a list. */
  streaming(): void {
    this.#started = true;
  }

  /** Written with the run's end; told before the function runs. */
  servedBy(deploymentId: string): void {
    this.#deploymentId = deploymentId;
    this.#started = true;
  }

  item(value: unknown): void {
    this.#started = true;
    (this.#items ??= new StoredItems(this.#deps.resultLimitBytes)).add(value);
  }

  /** Records success; a given run time is not used (the record's monotonic clock runs from claim to end here). */
  succeed(...args: [result?: unknown, options?: SucceedOptions]): Promise<void> {
    const limit = this.#deps.resultLimitBytes;
    const result = args[1]?.truncated
      ? { json: null, truncated: true }
      : args.length
      ? storedResult(args[0], limit)
      : (this.#items ?? new StoredItems(limit)).result();
    return this.#end({ status: "success", result });
  }

  /**
   * Records the failure — or, once the signal was aborted (timeout, cancel), the abort's reason — unless
   * it is a passing reason of the platform's met before the function started: then the run goes back on
   * the queue (see the module's comment).
   */
  fail(error: unknown): Promise<void> {
    const outcome = classifyFailure(error, { signal: this.signal });
    if (outcome.status === "cancelled" || !outcome.passing || this.#started) return this.#end(outcome);
    this.#items?.close();
    this.#ending ??= this.#putBack(outcome.error);
    return this.#ending;
  }

  cancelled(): Promise<void> {
    return this.fail(new RunCancelled());
  }

  #end(outcome: RunOutcome): Promise<void> {
    // A stored list was read by `succeed` already; any other end drops it.
    this.#items?.close();
    this.#ending ??= this.#write(outcome);
    return this.#ending;
  }

  /**
   * Puts the run back on the queue, or ends it once its deadline passed. A put-back the store refuses is
   * tried again (the lease keeps the run this process's meanwhile), as an end would be.
   */
  async #putBack(reason: RunErrorInfo): Promise<void> {
    const row = this.#row;
    const { logger, now } = this.#deps;
    const graceMs = await this.#deps.graceMs;
    const deadline = Number(row.created_at) + graceMs;
    for (let pauseMs = FIRST_PUT_BACK_RETRY_MS;; pauseMs = Math.min(pauseMs * 2, MAX_PUT_BACK_RETRY_MS)) {
      // A cancel or the grace period's timer (its deadline passed: it runs from the claim, the deadline
      // from the acceptance) ends the run instead.
      if (this.signal.aborted) {
        const cancelled = this.signal.reason instanceof RunCancelled;
        return await this.#write(cancelled ? { status: "cancelled" } : pastDeadline(reason, graceMs));
      }
      if (now() >= deadline) return await this.#write(pastDeadline(reason, graceMs));
      try {
        if (!(await this.#deps.requeue(row.run_id))) break;
      } catch (error) {
        if (storeUnavailableReason(error) === null) throw error;
        await new Promise((resolve) => setTimeout(resolve, pauseMs).unref());
        continue;
      }
      logger.info(
        { run_id: row.run_id, app: `${row.project_id}/${row.app_id}`, reason: reason.type, detail: reason.message },
        "async run could not start; put back on the queue with its place kept",
      );
      // The live pages see it queued again (its start is told again when it is claimed).
      this.#deps.events.created({
        runId: row.run_id,
        projectId: row.project_id,
        appId: row.app_id,
        functionName: row.function_name,
        mode: row.mode,
        status: "queued",
        createdAt: now(),
      });
      return;
    }
    // Not put back: a cancel was asked for it (it ends `cancelled` here), or it was ended elsewhere
    // meanwhile (nothing is written).
    await this.#write({ status: "cancelled" });
  }

  async #write(outcome: RunOutcome): Promise<void> {
    const row = this.#row;
    const { finishes, events, logger } = this.#deps;
    const end = runEnd(row, outcome, {
      now: this.#deps.now(),
      runTimeMs: Math.round(performance.now() - this.#startedAt),
      deploymentId: this.#deploymentId,
    });
    if (!(await endLeasedRun({ finishes, events }, end))) {
      logger.warn({ run_id: row.run_id }, "run was ended elsewhere before it finished here; its outcome is dropped");
    }
  }
}
