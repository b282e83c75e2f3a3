/**
 * Periodic upkeep of run records: renews this process's leases (and picks up cancels asked of other
 * processes), ends runs whose process died as `failure`/`interrupted` (never re-running them), removes
 * results past the TTL and forgets idempotency keys past their window.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";
import { IDEMPOTENCY_WINDOW_MS } from "./_idempotency.ts";
import type { LocalRuns } from "./_local_runs.ts";
import { expireResults, finishRun, renewLeases, selectStaleRuns } from "./_queries.ts";

/** What upkeep needs. */
export interface MaintenanceOptions {
  db: Kysely<Database>;
  logger: Logger;
  owner: string;
  leaseMs: number;
  resultTtlMs: number;
  local: LocalRuns;
  /** Called when deliveries were added to the outbox. */
  onDeliveries(): void;
}

/** The error of a run whose process stopped while it ran. */
export const INTERRUPTED = {
  type: "interrupted",
  message: "The server process running this run stopped before it finished; it was not run again because functions may have side effects",
  traceback: null,
};

/** Starts the upkeep loop (every third of the lease); it runs once at once. */
export function startMaintenance(options: MaintenanceOptions): Ticker {
  const { db, logger } = options;
  async function upkeep(): Promise<void> {
    for (const runId of await renewLeases(db, { owner: options.owner, leaseMs: options.leaseMs })) {
      options.local.get(runId)?.cancel();
    }
    const now = Date.now();
    let interrupted = 0;
    for (const row of await selectStaleRuns(db, now)) {
      const ended = await finishRun(db, { ...row, started_at: null }, {
        outcome: { status: "failure", error: INTERRUPTED },
        from: ["running"],
        staleBefore: now,
        now,
      });
      if (!ended) continue;
      interrupted++;
      logger.warn({ run_id: row.run_id, lease_owner: row.lease_owner }, "run interrupted: its process stopped while it ran");
    }
    if (interrupted) options.onDeliveries();
    await expireResults(db, { resultTtlMs: options.resultTtlMs, now });
    await db.deleteFrom("idempotency_keys").where("created_at", "<=", now - IDEMPOTENCY_WINDOW_MS).execute();
  }
  return startTicker(upkeep, {
    intervalMs: Math.max(200, Math.floor(options.leaseMs / 3)),
    onError: (error) => logger.error({ err: error }, "run upkeep failed"),
  });
}
