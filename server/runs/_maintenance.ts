/**
 * Periodic upkeep of run records: renews this process's leases (and picks up cancels asked of other
 * processes), ends runs whose process died as `failure`/`interrupted` (never re-running them), removes
 * results past the TTL and forgets idempotency keys past their window. A lease rescue (a run whose lease
 * ran out) is a guarded end like any other: compared with the run's status and the lease generation it
 * was read in, it starts a new generation, and it stands — an owner that was only blocked or cut off from
 * the store finds the run ended when it comes back and drops its own outcome (a run ends once). The
 * record keeps the owner's name (`swept_owner`). This process never rescues a run it runs itself, nor
 * one of a process of this host that it sees alive (see `_owners.ts`), and
 * after an upkeep that failed (the store away), stale leases wait one more lease, for their owners to
 * renew them.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import { forgetDeliverySecrets, releaseDeliveryLeases } from "../webhooks/mod.ts";
import type { Database } from "../store/mod.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";
import { IDEMPOTENCY_WINDOW_MS } from "./_idempotency.ts";
import { INTERRUPTED, type LocalRuns } from "./_local_runs.ts";
import type { RunEvents } from "./_run_events.ts";
import { deadOwners, forgetOwner, ownerState } from "./_owners.ts";
import { endStoredRun, runEnd } from "./_run_end.ts";
import { expireResults, renewLeases, selectRunsOf, selectStaleRuns } from "./_queries.ts";
import { expireRunLogs } from "./run_logs.ts";
import { expireAppSamples } from "../store/statements/app_insights.ts";
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
      where: { staleBefore?: number; owner?: string; sweptOwner?: string | null; generation?: number },
    ): Promise<void> {
      // Cut off: its run time was not measured.
      const end = runEnd(row, { status: "failure", error: INTERRUPTED }, { now, runTimeMs: null });
      const ended = await endStoredRun({ db, events: options.events }, end, { from: ["running"], ...where });
      if (ended) interrupted++;
    }
    // A process of this host that is gone cannot renew: end its runs, and free the webhook deliveries it
    // was attempting, now rather than after their leases.
    for (const owner of options.ownersDir ? deadOwners(options.ownersDir, options.owner) : []) {
      for (const row of await selectRunsOf(db, owner)) await interrupt(row, { owner, sweptOwner: owner });
      if (await releaseDeliveryLeases(db, owner)) interrupted++;
      forgetOwner(options.ownersDir!, owner);
    }
    // A lease that ran out means its owner is gone, or blocked longer than the lease: either way the
    // run is ended here, once, in the generation it was read in. A run of this process that is still
    // live here is not: its own lease ran out only because this upkeep was blocked too (a table lock),
    // and its renewal follows. Nor is the run of an owner this host sees alive (its pid, same start):
    // it was blocked from the store (connections ran out), not gone, and its own end follows.
    for (const row of now >= sweepFrom ? await selectStaleRuns(db, now) : []) {
      if (row.lease_owner === options.owner && options.local.has(row.run_id)) continue;
      if (options.ownersDir && row.lease_owner && ownerState(options.ownersDir, row.lease_owner) === "alive") {
        continue;
      }
      await interrupt(row, {
        staleBefore: now,
        sweptOwner: row.lease_owner,
        generation: Number(row.lease_generation),
      });
    }
    if (interrupted) options.onDeliveries();
    await expireResults(db, { resultTtlMs: options.resultTtlMs, now });
    await forgetDeliverySecrets(db, { before: now - options.resultTtlMs });
    await expireRunLogs(db, { before: now - options.resultTtlMs });
    // The charts' samples cover a day at least, whatever the results' TTL.
    await expireAppSamples(db, now - Math.max(options.resultTtlMs, 25 * 3_600_000));
    await db.deleteFrom("idempotency_keys").where("created_at", "<=", now - IDEMPOTENCY_WINDOW_MS).execute();
    // A cluster's WebSocket tickets past their minute (the table is empty on a server of one host).
    await db.deleteFrom("websocket_tickets").where("expires_at", "<=", now).execute();
  }
  return startTicker(upkeep, {
    intervalMs: Math.max(200, Math.floor(options.leaseMs / 3)),
    onError: (error) => logger.error({ err: error }, "run upkeep failed"),
  });
}
