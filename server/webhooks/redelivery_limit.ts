/**
 * How often a run's webhook may be redelivered: a token bucket per run, kept as one time (GCRA, the
 * generic cell rate algorithm: the time at which the bucket is full again), so the store holds one
 * number per delivery and every process reads and writes the same one.
 */

/** A token bucket's size and refill. */
export interface RedeliveryLimit {
  /** Redeliveries allowed at once, when none was made for a while. */
  burst: number;
  /** One more redelivery is allowed every this many milliseconds. */
  intervalMs: number;
}

/** Five at once, then one every 12 s: five a minute per run. */
export const REDELIVERY_LIMIT: RedeliveryLimit = { burst: 5, intervalMs: 12_000 };

/**
 * Takes one redelivery from a bucket that is full again at `fullAt` (null: full now): allowed, with the
 * bucket's new `fullAt` to store, or refused, with how long until one is allowed.
 */
export function takeRedelivery(
  fullAt: number | null,
  options: { now: number; limit?: RedeliveryLimit },
): { ok: true; fullAt: number } | { ok: false; retryAfterMs: number } {
  const { burst, intervalMs } = options.limit ?? REDELIVERY_LIMIT;
  const from = Math.max(fullAt ?? options.now, options.now);
  // `from - now` is the refill still owed; the bucket has room while that leaves one token.
  const over = from - options.now - (burst - 1) * intervalMs;
  if (over > 0) return { ok: false, retryAfterMs: over };
  return { ok: true, fullAt: from + intervalMs };
}
