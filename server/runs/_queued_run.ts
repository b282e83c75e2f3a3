/**
 * The record of an async run the dispatcher executes: what `executeRun` reports to. Its outcome is
 * written once, to the store, with its webhook delivery, from this process's lease.
 */
import type { Logger } from "../log.ts";
import { isProblemError } from "../problems/mod.ts";
import { toRunError } from "./executor.ts";
import type { LeasedFinishes } from "./_leased_finishes.ts";
import { RunCancelled, RunTimedOut } from "./_local_runs.ts";
import type { RunOutcome } from "./_queries.ts";
import type { RunEvents } from "./_run_events.ts";
import { endLeasedRun, runEnd } from "./_run_end.ts";
import { StoredItems, storedResult } from "./_stored_result.ts";
import type { RunRecorder } from "./run_call.ts";
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
}

/** The outcome a failure (or the reason the run's signal was aborted with) stands for. */
function failureOutcome(error: unknown): RunOutcome {
  if (error instanceof RunCancelled) return { status: "cancelled" };
  if (error instanceof RunTimedOut) {
    return { status: "failure", error: { type: "timeout", message: error.message, traceback: null } };
  }
  // A call that never started (unknown app or function, app failed to load) has no errorType: the
  // record says why in the problem's kind (`not_found`, `app_unavailable`).
  if (isProblemError(error) && !("errorType" in error)) {
    return {
      status: "failure",
      error: { type: error.kind.replace(/-/g, "_"), message: error.message, traceback: null },
    };
  }
  return { status: "failure", error: toRunError(error) };
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
  /** When it was claimed, on the monotonic clock: its run time is measured there. */
  readonly #startedAt = performance.now();

  constructor(row: RunRow, deps: QueuedRunDeps & { signal: AbortSignal }) {
    this.runId = row.run_id;
    this.signal = deps.signal;
    this.#row = row;
    this.#deps = deps;
  }

  /** An async run keeps its mode when its function streams: the items are stored as a list. */
  streaming(): void {}

  /** Written with the run's end. */
  servedBy(deploymentId: string): void {
    this.#deploymentId = deploymentId;
  }

  item(value: unknown): void {
    (this.#items ??= new StoredItems(this.#deps.resultLimitBytes)).add(value);
  }

  /** Records success; a given run time is not used (the record's monotonic clock runs from claim to end here). */
  succeed(...args: [result?: unknown, options?: { runTimeMs?: number }]): Promise<void> {
    const limit = this.#deps.resultLimitBytes;
    const result = args.length ? storedResult(args[0], limit) : (this.#items ?? new StoredItems(limit)).result();
    return this.#end({ status: "success", result });
  }

  /** Records the failure — or, once the signal was aborted (timeout, cancel), the abort's reason. */
  fail(error: unknown): Promise<void> {
    return this.#end(failureOutcome(this.signal.aborted ? this.signal.reason : error));
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
