/**
 * The run service's controls of a run: cancel (here, queued, or running in another process) and a
 * finished run's webhook redelivered. A run ends once: a queued run is cancelled by a guarded
 * transition, a running one by whoever runs it.
 */
import { ProblemError } from "../problems/mod.ts";
import { isTerminal } from "../store/mod.ts";
import { redeliver, REDELIVERY_LIMIT } from "../webhooks/mod.ts";
import type { LocalRuns } from "./_local_runs.ts";
import { selectRun } from "./_queries.ts";
import { endStoredRun, runEnd } from "./_run_end.ts";
import type { RunEvents } from "./_run_events.ts";
import type { RunReads } from "./_run_reads.ts";
import type { RunRef, RunServiceOptions } from "./_service_types.ts";
import type { Run } from "./_view.ts";

/** What `RunControls` needs besides the service's options. */
export interface RunControlsOptions {
  /** The runs executing in this process. */
  local: LocalRuns;
  events: RunEvents;
  reads: RunReads;
  /** The store's clock. */
  clock: () => number;
  /** Called when deliveries were added to the outbox. */
  onDeliveries(): void;
}

/** Cancels runs and redelivers their webhooks. */
export class RunControls {
  readonly #options: RunServiceOptions;
  readonly #wiring: RunControlsOptions;

  constructor(options: RunServiceOptions, wiring: RunControlsOptions) {
    this.#options = options;
    this.#wiring = wiring;
  }

  /** Waits (polling the store) until `ref` has ended, or `timeoutMs` passed. */
  async #untilEnded(ref: RunRef, timeoutMs: number): Promise<void> {
    const { db } = this.#options;
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const row = await selectRun(db, ref);
      if (!row || isTerminal(row.status)) return;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Cancels a run (see `RunService.cancelRun`). */
  async cancelRun(ref: RunRef): Promise<Run> {
    const options = this.#options;
    const { db, logger, notifier } = options;
    const { local, events, reads, clock, onDeliveries } = this.#wiring;
    const row = await reads.findRun(ref);
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
      if (!ended) return await this.cancelRun(ref);
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
        await this.#untilEnded(ref, options.remoteCancelWaitMs ?? 3_000);
      }
    }
    logger.info({ run_id: ref.runId, was: row.status }, "run cancelled");
    return await reads.view(await reads.findRun(ref));
  }

  /** Delivers a finished run's webhook once more (see `RunService.redeliverWebhook`). */
  async redeliverWebhook(ref: RunRef): Promise<Run> {
    const { db, logger, config } = this.#options;
    const { reads, clock, onDeliveries } = this.#wiring;
    const row = await reads.findRun(ref);
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
    return await reads.view(await reads.findRun(ref));
  }
}
