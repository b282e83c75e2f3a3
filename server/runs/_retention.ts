/**
 * Run retention: whole run records (with their log lines, webhook delivery and attempts) are deleted
 * once they ended longer ago than the retention, so the store holds a window of history, not all of it.
 * The purge goes in small batches with a pause between them: a backlog of a million expired records
 * (a first start with a retention, or a long stop) is worked off without a statement long enough to
 * stall the calls that share the store.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";
import { deleteDeliveriesOf } from "../webhooks/mod.ts";
import { IDEMPOTENCY_WINDOW_MS } from "./_idempotency.ts";
import { deleteRunLogsOf } from "./run_logs.ts";

/** The retention when none is configured: 30 days. */
export const DEFAULT_RETENTION_MS = 30 * 86_400_000;

/** Options of `purgeExpiredRuns`. */
export interface PurgeOptions {
  /** How long an ended run is kept. */
  retentionMs: number;
  /** How long a result is kept: a record is never deleted before its result expired. */
  resultTtlMs: number;
  /** Now, in Unix milliseconds (the store's clock). */
  now: number;
  /** Runs deleted per transaction (default 200). */
  batchSize?: number;
  /** The shortest pause between two batches, in milliseconds (default 20; at least 3× the batch's time). */
  pauseMs?: number;
  /** The most batches of this call (default: until none is left). */
  maxBatches?: number;
  /** Stops between batches when aborted (a stopping server). */
  signal?: AbortSignal;
}

/**
 * The end time before which a run may be deleted: the retention, but never before its result expired
 * or while its `Idempotency-Key` still answers from it.
 */
export function retentionCutoff(options: Pick<PurgeOptions, "retentionMs" | "resultTtlMs" | "now">): number {
  return options.now - Math.max(options.retentionMs, options.resultTtlMs, IDEMPOTENCY_WINDOW_MS);
}

/**
 * The oldest expired runs (their results already gone), oldest first: an index range on
 * `runs_by_completion`. A run whose webhook is still being delivered is left for a later purge.
 */
async function expiredRunIds(db: Kysely<Database>, options: { before: number; limit: number }): Promise<string[]> {
  const rows = await db.selectFrom("runs").select("run_id")
    .where("result_expired", "=", 1)
    .where("completed_at", "<=", options.before)
    .where((eb) =>
      eb.not(eb.exists(
        eb.selectFrom("webhook_deliveries as d").select("d.run_id")
          .whereRef("d.run_id", "=", "runs.run_id").where("d.status", "=", "pending"),
      ))
    )
    .orderBy("completed_at")
    .limit(options.limit)
    .execute();
  return rows.map((r) => r.run_id);
}

/** Deletes runs and everything recorded of them, in one transaction. */
async function deleteRuns(db: Kysely<Database>, runIds: string[]): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await deleteRunLogsOf(trx, runIds);
    await deleteDeliveriesOf(trx, runIds);
    await trx.deleteFrom("runs").where("run_id", "in", runIds).execute();
  });
}

/**
 * Deletes the runs that ended before the retention cutoff, batch by batch, and resolves with how many
 * it deleted.
 */
export async function purgeExpiredRuns(db: Kysely<Database>, options: PurgeOptions): Promise<number> {
  const batchSize = options.batchSize ?? 200;
  const pauseMs = options.pauseMs ?? 20;
  const before = retentionCutoff(options);
  let deleted = 0;
  for (let batch = 0; batch < (options.maxBatches ?? Infinity); batch++) {
    if (options.signal?.aborted) break;
    const started = performance.now();
    const runIds = await expiredRunIds(db, { before, limit: batchSize });
    if (runIds.length) await deleteRuns(db, runIds);
    deleted += runIds.length;
    if (runIds.length < batchSize) break;
    // Calls waiting for the store (on SQLite, for its one writer) go first: the purge takes at most a
    // quarter of the time (measured: 20 ms pauses let it take half, and sync calls' p99 doubled).
    const tookMs = performance.now() - started;
    await new Promise((resolve) => setTimeout(resolve, Math.max(pauseMs, tookMs * 3)));
  }
  return deleted;
}

/** Options of `startRetention`. */
export interface RetentionOptions {
  db: Kysely<Database>;
  logger: Logger;
  retentionMs: number;
  resultTtlMs: number;
  /** How often the purge looks for expired runs (default 60 s). */
  intervalMs?: number;
  /** The store's clock (default the process's). */
  now?: () => number;
}

/**
 * Starts the purge loop: once at start, then every `intervalMs`. It runs apart from the lease upkeep, so
 * a long purge never delays a lease renewal.
 */
export function startRetention(options: RetentionOptions): Ticker {
  const { db, logger } = options;
  const stopping = new AbortController();
  const ticker = startTicker(async () => {
    const started = performance.now();
    const deleted = await purgeExpiredRuns(db, {
      retentionMs: options.retentionMs,
      resultTtlMs: options.resultTtlMs,
      now: (options.now ?? Date.now)(),
      signal: stopping.signal,
    });
    if (deleted) {
      logger.info({ deleted, duration_ms: Math.round(performance.now() - started) }, "expired run records deleted");
    }
  }, {
    intervalMs: options.intervalMs ?? 60_000,
    onError: (error) => logger.error({ err: error }, "deleting expired run records failed"),
  });
  return {
    ...ticker,
    stop() {
      stopping.abort();
      return ticker.stop();
    },
  };
}
