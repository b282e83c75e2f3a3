/**
 * Periodic upkeep of run records: renews this process's leases (and picks up cancels asked of other
 * processes), ends runs whose process died as `failure`/`interrupted` (never re-running them), removes
 * results past the TTL and forgets idempotency keys past their window.
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
import { finishAndReport } from "./_finish_and_report.ts";
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
  async function upkeep(): Promise<void> {
    const clock = options.now ?? Date.now;
    for (const runId of await renewLeases(db, { owner: options.owner, leaseMs: options.leaseMs, now: clock() })) {
      options.local.get(runId)?.cancel();
    }
    const now = clock();
    let interrupted = 0; // runs ended (or deliveries freed) that the delivery worker must look at
    async function interrupt(row: RunRow, where: { staleBefore?: number; owner?: string }): Promise<void> {
      const ended = await finishAndReport({ ...row, started_at: null }, {
        db,
        events: options.events,
        outcome: { status: "failure", error: INTERRUPTED },
        from: ["running"],
        now,
        ...where,
        runTimeMs: null,
      });
      if (ended) interrupted++;
    }
    // A process of this host that is gone cannot renew: end its runs, and free the webhook deliveries it
    // was attempting, now rather than after their leases.
    for (const owner of options.ownersDir ? deadOwners(options.ownersDir, options.owner) : []) {
      for (const row of await selectRunsOf(db, owner)) await interrupt(row, { owner });
      if (await releaseDeliveryLeases(db, owner)) interrupted++;
      forgetOwner(options.ownersDir!, owner);
    }
    for (const row of await selectStaleRuns(db, now)) await interrupt(row, { staleBefore: now });
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
