/**
 * The run service's write-behind: how it is wired to the service's options, and what it logs when the
 * store refuses a record, gives one up, or had the run ended by another process first.
 */
import type { RunServiceOptions } from "./_service_types.ts";
import { createWriteBehind, type WriteBehind } from "./_write_behind.ts";

/** What `createRunWriter` needs besides the service's options. */
export interface RunWriterOptions {
  /** This process's lease owner id. */
  owner: string;
  /** The store's clock. */
  clock: () => number;
  /** Called when deliveries were added to the outbox. */
  onDeliveries(): void;
}

/** Creates the service's write-behind of sync and stream run records. */
export function createRunWriter(options: RunServiceOptions, wiring: RunWriterOptions): WriteBehind {
  const { db, logger } = options;
  const { owner, clock, onDeliveries } = wiring;
  return createWriteBehind(db, {
    owner,
    now: clock,
    retryDelaysMs: options.recordRetry?.delaysMs,
    keptRetryMs: options.recordRetry?.keptMs,
    onDeliveries,
    handOff: options.deliveryHandOff,
    onError(error, runId) {
      if (options.storeOutage?.refused(error)) return;
      logger.error({ err: error, run_id: runId }, "run record could not be stored; kept in memory and retried");
    },
    onLost: (error, runId) =>
      logger.error({ err: error, run_id: runId }, "run record lost: the store refused it until it was given up"),
    // A run ends once: another process ended this one first (a lease rescue while this one was blocked).
    onDropped: (runId, { dropped, stored }) =>
      logger.warn({
        run_id: runId,
        dropped_status: dropped.status,
        dropped_error_type: dropped.error_type ?? null,
        stored_status: stored.status,
        stored_error_type: stored.error_type,
        stored_completed_at: stored.completed_at === null ? null : Number(stored.completed_at),
        rescued_from: stored.swept_owner,
      }, "run was ended elsewhere before it finished here; its outcome is dropped"),
  });
}
