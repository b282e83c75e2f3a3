/**
 * Periodic upkeep of run records: renews this process's leases (and picks up cancels asked of other
 * processes), ends runs whose process died as `failure`/`interrupted` (never re-running them), removes
 * results past the TTL and forgets idempotency keys past their window. A run ended because its lease ran
 * out keeps its owner's name (`swept_owner`): an owner that was only cut off from the store still records
 * its true end over that guess; and after an upkeep that failed (the store away), stale leases wait one
 * more lease, for their owners to renew them.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import { forgetDeliverySecrets, releaseDeliveryLeases } from "../webhooks/mod.ts";
import type { Database } from "../store/mod.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";
import { IDEMPOTENCY_WINDOW_MS } from "./_idempotency.ts";
import { INTERRUPTED, type LocalRuns } from "./_local_runs.ts";
import type { RunEvents } from "./_run_events.ts";
import { deadOwners, forgetOwner } from "./_owners.ts";
import { endStoredRun, runEnd } from "./_run_end.ts";
import { expireResults, renewLeases, selectRunsOf, selectStaleRuns } from "./_queries.ts";
import { expireRunLogs } from "./run_logs.ts";
import type { RunRow } from "./_view.ts";

/** What upkeep needs. */
export interface MaintenanceOptions {
  db: Kysely<Database>;
  logger: Logger;
  events: RunEvents;
  owner: string;
  leaseMs: number;
  resultTtlMs: number;
  /** Where lease owners record their pid (see `_owners.ts`); without it dead processes are found by lease alone. */
  ownersDir?: string;
  local: LocalRuns;
  /** Called when deliveries were added to the outbox. */
  onDeliveries(): void;
  /** The store's clock, which decides leases (default the process's). */
  now?: () => number;
}

/** Starts the upkeep loop (every third of the lease); it runs once at once. */
export function startMaintenance(options: MaintenanceOptions): Ticker {
  const { db, logger } = options;
  const clock = options.now ?? Date.now;
  // An upkeep that failed means the store may have been away for everyone: other processes' leases ran
  // out meanwhile because they could not renew them either. Until one lease after this process reaches
  // the store again, it leaves stale leases alone, so that their owners, if alive, renew them first.
  let storeWasAway = false;
  let sweepFrom = -Infinity;
  async function upkeep(): Promise<void> {
    try {
      await upkeepOnce();
    } catch (error) {
      storeWasAway = true;
      throw error;
    }
  }
  async function upkeepOnce(): Promise<void> {
    for (const runId of await renewLeases(db, { owner: options.owner, leaseMs: options.leaseMs, now: clock() })) {
      options.local.get(runId)?.cancel();
    }
    const now = clock();
    if (storeWasAway) {
      storeWasAway = false;
      sweepFrom = now + options.leaseMs;
      logger.info(
        { lease_ms: options.leaseMs },
        "run upkeep reaches the store again; runs whose lease ran out are ended only after one more lease",
      );
    }
    let interrupted = 0; // runs ended (or deliveries freed) that the delivery worker must look at
    async function interrupt(
      row: RunRow,
      where: { staleBefore?: number; owner?: string; sweptOwner?: string | null },
    ): Promise<void> {
      // Cut off: its run time was not measured.
      const end = runEnd(row, { status: "failure", error: INTERRUPTED }, { now, runTimeMs: null });
      const ended = await endStoredRun({ db, events: options.events }, end, { from: ["running"], ...where });
      if (ended) interrupted++;
    }
    // A process of this host that is gone cannot renew: end its runs, and free the webhook deliveries it
    // was attempting, now rather than after their leases.
    for (const owner of options.ownersDir ? deadOwners(options.ownersDir, options.owner) : []) {
      for (const row of await selectRunsOf(db, owner)) await interrupt(row, { owner });
      if (await releaseDeliveryLeases(db, owner)) interrupted++;
      forgetOwner(options.ownersDir!, owner);
    }
    // A lease that ran out is a guess that its owner is gone: the run keeps the owner's name, so that an
    // owner merely cut off from the store longer than the lease can still record the truth.
    for (const row of now >= sweepFrom ? await selectStaleRuns(db, now) : []) {
      await interrupt(row, { staleBefore: now, sweptOwner: row.lease_owner });
    }
    if (interrupted) options.onDeliveries();
    await expireResults(db, { resultTtlMs: options.resultTtlMs, now });
    await forgetDeliverySecrets(db, { before: now - options.resultTtlMs });
    await expireRunLogs(db, { before: now - options.resultTtlMs });
    await db.deleteFrom("idempotency_keys").where("created_at", "<=", now - IDEMPOTENCY_WINDOW_MS).execute();
  }
  return startTicker(upkeep, {
    intervalMs: Math.max(200, Math.floor(options.leaseMs / 3)),
    onError: (error) => logger.error({ err: error }, "run upkeep failed"),
  });
}
