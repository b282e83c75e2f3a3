/**
 * Batched lookup: the read-side twin of `group_commit.ts`. Keys asked for while no read is in flight are
 * read together by one `read(keys)` (one statement, one round trip); keys asked for while a read is in
 * flight wait for the next one. Every answer therefore comes from a read that started after it was
 * asked for: a row changed before the call (a revoked token, say) is never answered from an older read.
 */

/** Looks keys up in shared reads. */
export interface BatchedLookup<K, V> {
  /** The value stored for `key` (undefined when there is none), read after this call. */
  get(key: K): Promise<V | undefined>;
}

/** Options of `createBatchedLookup`. */
export interface BatchedLookupOptions {
  /** The most distinct keys one read takes; more wait for the next one (default 256). */
  batchLimit?: number;
}

interface Waiting<V> {
  resolve(value: V | undefined): void;
  reject(error: unknown): void;
}

/**
 * Creates a lookup that reads with `read`, which answers the rows found for the keys it is given (a key
 * it leaves out has no value). One read runs at a time.
 */
export function createBatchedLookup<K, V>(
  read: (keys: K[]) => Promise<Map<K, V>>,
  options: BatchedLookupOptions = {},
): BatchedLookup<K, V> {
  const limit = options.batchLimit ?? 256;
  let waiting = new Map<K, Array<Waiting<V>>>();
  let reading = false;
  let scheduled = false;

  async function readNext(): Promise<void> {
    scheduled = false;
    if (reading || waiting.size === 0) return;
    let batch: Map<K, Array<Waiting<V>>>;
    if (waiting.size <= limit) {
      batch = waiting;
      waiting = new Map();
    } else {
      batch = new Map();
      for (const [key, waiters] of waiting) {
        if (batch.size === limit) break;
        batch.set(key, waiters);
        waiting.delete(key);
      }
    }
    reading = true;
    try {
      const found = await read([...batch.keys()]);
      for (const [key, waiters] of batch) for (const waiter of waiters) waiter.resolve(found.get(key));
    } catch (error) {
      for (const waiters of batch.values()) for (const waiter of waiters) waiter.reject(error);
    } finally {
      reading = false;
      schedule();
    }
  }

  function schedule(): void {
    if (scheduled || reading || waiting.size === 0) return;
    scheduled = true;
    // Keys asked for in the same turn of the event loop join the read.
    setImmediate(() => void readNext());
  }

  return {
    get(key) {
      return new Promise((resolve, reject) => {
        const waiters = waiting.get(key);
        if (waiters) waiters.push({ resolve, reject });
        else waiting.set(key, [{ resolve, reject }]);
        schedule();
      });
    },
  };
}
