/**
 * Group commit: writes submitted in the same turn of the event loop are made by one `write(batch)` call
 * (one transaction, one commit), and each submitter's promise settles once that batch has committed.
 * By default nobody waits for a timer: the batch is whatever arrived before the event loop came round;
 * with `delayMs`, a batch collects for that long (for writes nobody answers a caller on). With
 * `maxInFlight: 1`, the next batch collects while one is being written, so batches grow with the load
 * instead of the number of open transactions (what a database with a round trip per statement wants).
 */

/** Adds writes to the next shared commit. */
export interface GroupCommit<T> {
  /** Resolves once `item` is committed; rejects when its batch failed. */
  add(item: T): Promise<void>;
}

/** Options of `createGroupCommit`. */
export interface GroupCommitOptions {
  /** The most items one batch takes; more wait for the next one (default 256). */
  batchLimit?: number;
  /** How long a batch collects before it is written (default 0: at the end of the event-loop turn). */
  delayMs?: number;
  /** How many batches may be written at once (default unlimited); the rest wait for one to end. */
  maxInFlight?: number;
}

interface Pending<T> {
  item: T;
  resolve(): void;
  reject(error: unknown): void;
}

/** Creates a group committer that writes batches with `write` (which should commit them in one transaction). */
export function createGroupCommit<T>(
  write: (batch: T[]) => Promise<void>,
  options: GroupCommitOptions = {},
): GroupCommit<T> {
  const limit = options.batchLimit ?? 256;
  const delayMs = options.delayMs ?? 0;
  const maxInFlight = options.maxInFlight ?? Infinity;
  const pending: Array<Pending<T>> = [];
  let scheduled = false;
  let inFlight = 0;

  async function commit(): Promise<void> {
    scheduled = false;
    if (inFlight >= maxInFlight) return; // the batch in flight schedules the next one when it ends
    const batch = pending.splice(0, limit);
    inFlight++;
    if (pending.length) schedule();
    try {
      await write(batch.map((entry) => entry.item));
      for (const entry of batch) entry.resolve();
    } catch (error) {
      for (const entry of batch) entry.reject(error);
    } finally {
      inFlight--;
      if (pending.length) schedule();
    }
  }

  function schedule(): void {
    if (scheduled || inFlight >= maxInFlight) return;
    scheduled = true;
    if (delayMs > 0) setTimeout(() => void commit(), delayMs);
    else setImmediate(() => void commit());
  }

  return {
    add(item) {
      return new Promise((resolve, reject) => {
        pending.push({ item, resolve, reject });
        schedule();
      });
    },
  };
}
