/**
 * Deferred, batched writes of sync and stream run records, so recording a run never adds a store write
 * to a sync call's path. Writes of the same run coalesce (a call that ends within the batch window is
 * written once, in its final state, as is a call that began late in one window and ends in the next);
 * one transaction per batch. A run already ended by someone else is not overwritten — except the
 * `interrupted` end another process's stale-lease sweep guessed while this one was cut off from the
 * store: the run's true end replaces it, and its webhook delivery too (`putEndDelivery`).
 *
 * A batch the store refuses is retried run by run (so one refused run does not fail the others), a few
 * times with backoff. A run that still cannot be written is reported (its waiter rejects with
 * `RecordNotStored`, `onError` is told) and kept in memory, retried in the background until it is
 * written or the process stops; a bounded number are kept, and one given up is logged by `onLost`.
 */
import type { Insertable, Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import {
  type ClaimedDelivery,
  type DeliveryHandOff,
  MAX_ATTEMPTS,
  type NewDelivery,
  putEndDelivery,
} from "../webhooks/mod.ts";
import { insertNewRuns, upsertRuns } from "../store/statements/run_rows.ts";

/** Raised to whoever waits for a run's record when the store did not take it after the retries. */
export class RecordNotStored extends Error {
  readonly runId: string;
  constructor(runId: string, options: { cause: unknown }) {
    super(`The record of run ${runId} could not be stored`, options);
    this.name = "RecordNotStored";
    this.runId = runId;
  }
}

/** The write-behind buffer. */
export interface WriteBehind {
  /**
   * Buffers the first row of a run that was never stored (a sync or stream call's): its states put
   * before the batch is written are written as an insert, the cheaper statement.
   */
  create(row: Insertable<RunTable>): void;
  /** Buffers the run's full row (and its webhook delivery, for a final state); replaces an earlier one. */
  put(row: Insertable<RunTable>, delivery?: NewDelivery): void;
  /**
   * Writes everything buffered now; resolves once the batch was written or its failed runs were kept
   * for a later retry (never rejects).
   */
  flush(): Promise<void>;
  /**
   * Writes the run `runId` just `put` with a delivery at the end of this event-loop turn, with every
   * other such final state of the turn in one transaction (other rows keep waiting for the batch window).
   * Resolves once it has committed; rejects with `RecordNotStored` when it could not be, after retries.
   */
  commitSoon(runId: string): Promise<void>;
  /** Stops the background retries, tries the kept runs once more, and reports those still unwritten as lost. */
  close(): Promise<void>;
}

/** Options of `createWriteBehind`. */
export interface WriteBehindOptions {
  /** The lease owner of this process's runs: their final states replace a stale-lease sweep's guess. */
  owner: string;
  /** The store's clock: when deliveries are made and due (default the process's). */
  now?: () => number;
  /** The batch window (default 25 ms). */
  delayMs?: number;
  /** Pauses before each retry of a refused write, run by run (default 20, 100 and 500 ms). */
  retryDelaysMs?: readonly number[];
  /** The first pause before a kept run is tried again in the background; it doubles up to 5 s (default 1 s). */
  keptRetryMs?: number;
  /** The most runs kept for a later retry; past it the oldest is given up (default 1,000). */
  keptLimit?: number;
  /** Called after a batch holding deliveries for the outbox (not handed off) was committed. */
  onDeliveries(): void;
  /** This process's delivery worker: deliveries are stored leased to it and handed to it after the commit. */
  handOff?: DeliveryHandOff;
  /** A run's record could not be written after the retries; it is kept and retried in the background (told once). */
  onError(error: unknown, runId: string): void;
  /** A kept run's record was given up (too many kept, or the process stopped): it is not stored. */
  onLost(error: unknown, runId: string): void;
}

interface Entry {
  row: Insertable<RunTable>;
  delivery?: NewDelivery;
  /** No state of the run was handed to a write before this one (see `create`). */
  first?: boolean;
  /** Set once the run was reported and kept: later background retries do not report it again. */
  kept?: true;
}

interface Waiter {
  resolve(): void;
  reject(error: unknown): void;
}

// A kept run's record is written at most 5 s after the store is back (one small transaction per try:
// cheap to repeat through an outage, and a caller told to check getRun finds it soon).
const MAX_KEPT_RETRY_MS = 5_000;

/** Whether `row` is a run's final state (not its `queued` or `running` one). */
function isEnd(row: Insertable<RunTable> | undefined): boolean {
  return row !== undefined && row.status !== "queued" && row.status !== "running";
}

/** Creates the buffer over `db`. */
export function createWriteBehind(db: Kysely<Database>, options: WriteBehindOptions): WriteBehind {
  const retryDelaysMs = options.retryDelaysMs ?? [20, 100, 500];
  const keptLimit = options.keptLimit ?? 1_000;
  const firstKeptRetryMs = options.keptRetryMs ?? 1_000;
  let rows = new Map<string, Insertable<RunTable>>();
  let deliveries = new Map<string, NewDelivery>();
  // Runs in `rows` none of whose states was handed to a write yet.
  let created = new Set<string>();
  // Of those, the runs created since the last batch window ended (see `flushWindow`).
  let young = new Set<string>();
  const waiters = new Map<string, Waiter>();
  // Runs whose record the store refused, oldest first, with the last error.
  const kept = new Map<string, Entry & { error: unknown }>();
  let keptRetryMs = firstKeptRetryMs;
  let keptTimer: NodeJS.Timeout | undefined;
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let chain: Promise<void> = Promise.resolve();

  async function write(entries: Entry[]): Promise<void> {
    const handed: ClaimedDelivery[] = [];
    let stored = 0;
    await db.transaction().execute(async (trx) => {
      const written = await writeRows(trx, entries);
      const now = (options.now ?? Date.now)();
      for (const { delivery } of entries) {
        // A run that had ended otherwise (this write's twin after an unsure commit) keeps that end's delivery.
        if (!delivery || !written.has(delivery.runId)) continue;
        const lease = options.handOff?.lease(now, delivery.endpoint) ?? undefined;
        const put = await putEndDelivery(trx, delivery, { now, lease, attemptsMore: MAX_ATTEMPTS });
        if (put === "leased") {
          handed.push({
            run_id: delivery.runId,
            endpoint: delivery.endpoint,
            body: delivery.body,
            secret: delivery.sealedSecret,
            credentials: delivery.sealedCredentials,
            attempts: 0,
            created_at: now,
          });
        } else stored++;
      }
    });
    if (handed.length) options.handOff!.take(handed);
    if (stored) options.onDeliveries();
  }

  /** Inserts the runs written for the first time and upserts the others; the ids of the runs written. */
  async function writeRows(trx: Kysely<Database>, entries: Entry[]): Promise<Set<string>> {
    const first: Array<Insertable<RunTable>> = [];
    const others: Array<Insertable<RunTable>> = [];
    for (const entry of entries) (entry.first ? first : others).push(entry.row);
    const written = await insertNewRuns(trx, first);
    for (const runId of await upsertRuns(trx, others, options.owner)) written.add(runId);
    return written;
  }

  function settle(runId: string, error?: unknown): void {
    const waiter = waiters.get(runId);
    if (!waiter) return;
    waiters.delete(runId);
    if (error === undefined) waiter.resolve();
    else waiter.reject(new RecordNotStored(runId, { cause: error }));
  }

  function keep(entry: Entry, error: unknown): void {
    const runId = entry.row.run_id;
    // A retry of an older state (the run's `running` row, taken from `kept` before its end was kept)
    // that failed again must not replace the end kept meanwhile: the end would never be written, and
    // the `running` row, once written, would keep its lease renewed for ever.
    if (isEnd(kept.get(runId)?.row) && !isEnd(entry.row)) return;
    kept.delete(runId);
    kept.set(runId, { ...entry, kept: true, error });
    if (!entry.kept) options.onError(error, runId);
    while (kept.size > keptLimit) {
      const [oldest, lost] = kept.entries().next().value!;
      kept.delete(oldest);
      options.onLost(lost.error, oldest);
    }
    if (!closed && !keptTimer) {
      keptTimer = setTimeout(retryKept, keptRetryMs);
      // A stopping process tries its kept runs in `close()`; the timer alone must not hold it open.
      keptTimer.unref();
    }
  }

  /** Writes `entries` in one transaction, else run by run with retries; keeps those that still fail. */
  async function commit(entries: Entry[]): Promise<void> {
    let failing: Entry[];
    let errors = new Map<string, unknown>();
    try {
      await write(entries);
      failing = [];
    } catch (error) {
      failing = entries;
      for (const entry of entries) errors.set(entry.row.run_id, error);
    }
    for (const delayMs of retryDelaysMs) {
      if (failing.length === 0) break;
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      const still: Entry[] = [];
      const stillErrors = new Map<string, unknown>();
      for (const entry of failing) {
        try {
          await write([entry]);
        } catch (error) {
          still.push(entry);
          stillErrors.set(entry.row.run_id, error);
        }
      }
      failing = still;
      errors = stillErrors;
    }
    const failed = new Set(failing.map((entry) => entry.row.run_id));
    for (const entry of entries) {
      const runId = entry.row.run_id;
      if (!failed.has(runId)) settle(runId);
    }
    for (const entry of failing) {
      const error = errors.get(entry.row.run_id);
      // A newer state of the run may have been put meanwhile: it supersedes this one.
      if (!rows.has(entry.row.run_id)) keep(entry, error);
      settle(entry.row.run_id, error);
    }
  }

  function enqueue(entries: Entry[]): Promise<void> {
    chain = chain.then(() => commit(entries)).catch((error: unknown) => {
      // Only a throwing callback gets here; nobody may wait forever for these runs.
      for (const entry of entries) settle(entry.row.run_id, error);
    });
    return chain;
  }

  function retryKept(): void {
    keptTimer = undefined;
    if (closed || kept.size === 0) return;
    const entries = [...kept.values()];
    kept.clear();
    const before = entries.length;
    void enqueue(entries).then(() => {
      // Back off while the store keeps refusing; start over once it took something.
      keptRetryMs = kept.size < before ? firstKeptRetryMs : Math.min(keptRetryMs * 2, MAX_KEPT_RETRY_MS);
    });
  }

  function flush(): Promise<void> {
    if (timer) clearTimeout(timer);
    timer = undefined;
    young = new Set();
    if (rows.size === 0) return chain;
    const entries: Entry[] = [];
    for (const row of rows.values()) {
      entries.push({ row, delivery: deliveries.get(row.run_id), first: created.has(row.run_id) });
    }
    rows = new Map();
    deliveries = new Map();
    created = new Set();
    return enqueue(entries);
  }

  /**
   * The end of a batch window: writes what was buffered, except the runs created during this window
   * that are still running. Those wait one window more: most calls end within it and are then written
   * once, in their final state, instead of an insert now and an upsert of their end then (a quarter of
   * a busy host's sync calls were written twice). A run is stored at most two windows after it began.
   */
  function flushWindow(): void {
    timer = undefined;
    const waiting = new Map<string, Insertable<RunTable>>();
    for (const runId of young) {
      const row = rows.get(runId);
      if (row && !isEnd(row)) {
        waiting.set(runId, row);
        rows.delete(runId);
      }
    }
    void flush();
    // A run created this window was never handed to a write: it is still to be inserted.
    rows = waiting;
    created = new Set(waiting.keys());
    if (rows.size) timer = setTimeout(flushWindow, options.delayMs ?? 25);
  }

  /** Writes the buffered final states that carry deliveries; other rows wait for the batch window. */
  function flushDeliveries(): void {
    if (deliveries.size === 0) return;
    const entries: Entry[] = [];
    for (const [runId, delivery] of deliveries) {
      entries.push({ row: rows.get(runId)!, delivery, first: created.delete(runId) });
      rows.delete(runId);
    }
    deliveries = new Map();
    void enqueue(entries);
  }

  let soon = false;
  function commitSoon(runId: string): Promise<void> {
    const done = new Promise<void>((resolve, reject) => waiters.set(runId, { resolve, reject }));
    if (!soon) {
      soon = true;
      setImmediate(() => {
        soon = false;
        flushDeliveries();
      });
    }
    return done;
  }

  function put(row: Insertable<RunTable>, delivery?: NewDelivery): void {
    rows.set(row.run_id, row);
    kept.delete(row.run_id);
    if (delivery) deliveries.set(delivery.runId, delivery);
    timer ??= setTimeout(flushWindow, options.delayMs ?? 25);
  }

  return {
    commitSoon,
    create(row) {
      put(row);
      created.add(row.run_id);
      young.add(row.run_id);
    },
    put,
    flush,
    async close() {
      closed = true;
      if (keptTimer) clearTimeout(keptTimer);
      keptTimer = undefined;
      await flush();
      if (kept.size) {
        const entries = [...kept.values()];
        kept.clear();
        await enqueue(entries);
      }
      for (const [runId, entry] of kept) options.onLost(entry.error, runId);
      kept.clear();
    },
  };
}
