/**
 * Deferred, batched writes of sync and stream run records, so recording a run never adds a store write
 * to a sync call's path. Writes of the same run coalesce (a call that ends within the batch window is
 * written once, in its final state, as is a call that began late in one window and ends in the next);
 * one transaction per batch (`./_record_commits.ts`: retries, runs kept through an outage). A run ends
 * once: a run already ended by someone else — a cancel, or the `interrupted` end another process's lease
 * rescue wrote while this one was blocked or cut off from the store — is not overwritten, gets no
 * delivery from here, and its dropped final state is told to `onDropped`. The guard is in the batch's
 * own statements (status, lease generation and owner compared in the upsert): no read per call.
 */
import type { Insertable, Kysely } from "kysely";
import { type Database, isTerminal } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import type { NewDelivery } from "../webhooks/mod.ts";
import { RecordCommits, type RecordCommitsOptions, type RecordEntry } from "./_record_commits.ts";

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

/** Options of `createWriteBehind`: the batch window, and how batches are committed. */
export interface WriteBehindOptions extends Omit<RecordCommitsOptions, "superseded"> {
  /** The batch window (default 25 ms). */
  delayMs?: number;
}

/** Creates the buffer over `db`. */
export function createWriteBehind(db: Kysely<Database>, options: WriteBehindOptions): WriteBehind {
  const delayMs = options.delayMs ?? 25;
  let rows = new Map<string, Insertable<RunTable>>();
  let deliveries = new Map<string, NewDelivery>();
  // Runs in `rows` none of whose states was handed to a write yet.
  let created = new Set<string>();
  // Of those, the runs created since the last batch window ended (see `flushWindow`).
  let young = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  const commits = new RecordCommits(db, { ...options, superseded: (runId) => rows.has(runId) });

  function flush(): Promise<void> {
    if (timer) clearTimeout(timer);
    timer = undefined;
    young = new Set();
    if (rows.size === 0) return commits.idle();
    const entries: RecordEntry[] = [];
    for (const row of rows.values()) {
      entries.push({ row, delivery: deliveries.get(row.run_id), first: created.has(row.run_id) });
    }
    rows = new Map();
    deliveries = new Map();
    created = new Set();
    return commits.enqueue(entries);
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
      if (row && !isTerminal(row.status)) {
        waiting.set(runId, row);
        rows.delete(runId);
      }
    }
    void flush();
    // A run created this window was never handed to a write: it is still to be inserted.
    rows = waiting;
    created = new Set(waiting.keys());
    if (rows.size) timer = setTimeout(flushWindow, delayMs);
  }

  /** Writes the buffered final states that carry deliveries; other rows wait for the batch window. */
  function flushDeliveries(): void {
    if (deliveries.size === 0) return;
    const entries: RecordEntry[] = [];
    for (const [runId, delivery] of deliveries) {
      entries.push({ row: rows.get(runId)!, delivery, first: created.delete(runId) });
      rows.delete(runId);
    }
    deliveries = new Map();
    void commits.enqueue(entries);
  }

  let soon = false;
  function commitSoon(runId: string): Promise<void> {
    const done = commits.waitFor(runId);
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
    commits.forget(row.run_id);
    if (delivery) deliveries.set(delivery.runId, delivery);
    timer ??= setTimeout(flushWindow, delayMs);
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
      // The buffer's last batch goes before the commits stop retrying (it is handed over at once).
      void flush();
      await commits.close();
    },
  };
}
