/**
 * The store's clock: the time that orders and schedules (run ids, `created_at`/`started_at`/
 * `completed_at`, leases, a webhook's `next_attempt_at`, expiry). On SQLite (one host) it is the
 * process's clock; on PostgreSQL it is the database server's, so processes on hosts with skewed clocks
 * still agree. Reading the database on every call would cost a round trip, so the clock measures the
 * database's time every few seconds and runs on from it with the monotonic clock (`performance.now()`):
 * a jump of the host's clock between two measures does not move it. A jump is also noticed (the host's
 * clock moved against the monotonic one, as after a suspend, which the monotonic clock does not count)
 * and measured again at once. Durations (`run_time_ms`) come from the monotonic clock alone.
 */

/** Unix milliseconds, as the store's engine sees them. */
export interface StoreClock {
  /** The current time in whole Unix milliseconds. */
  now(): number;
  /** Measures the database's time again (a no-op for the process's clock). */
  sync(): Promise<void>;
  /** The last measured offset: the database's clock minus the process's, in milliseconds. */
  readonly offsetMs: number;
  /** Stops the periodic refresh. */
  stop(): void;
}

/** The process's own clock (SQLite: one host, one clock): `localNow`, default `Date.now`. */
export function systemClock(localNow: () => number = () => Date.now()): StoreClock {
  return { now: () => localNow(), sync: () => Promise.resolve(), offsetMs: 0, stop() {} };
}

/** How often the database's time is measured again by default. */
export const DATABASE_CLOCK_REFRESH_MS = 5_000;

/** How far the host's clock may move against the monotonic clock before the database's time is measured again. */
const JUMP_MS = 1_000;

/** Options of `startDatabaseClock`. */
export interface DatabaseClockOptions {
  /** How often the database's time is measured again, in milliseconds (default 5 s). */
  refreshMs?: number;
  /** The process's clock (default `Date.now`), to notice its jumps and report the offset; tests give a skewed one. */
  localNow?: () => number;
  /** The monotonic clock (default `performance.now`). */
  monotonicNow?: () => number;
  /** Called when a measure failed; the clock runs on from the last one. */
  onError?(error: unknown): void;
}

/**
 * A clock that follows the database's: `readDatabaseMs` reads the database's time in Unix
 * milliseconds. Measures once before resolving (throws if that fails), then every `refreshMs`, and when
 * the host's clock jumps.
 */
export async function startDatabaseClock(
  readDatabaseMs: () => Promise<number>,
  options: DatabaseClockOptions = {},
): Promise<StoreClock> {
  const localNow = options.localNow ?? Date.now;
  const monotonicNow = options.monotonicNow ?? (() => performance.now());
  // The database's time at the monotonic instant `at`, and the host's clock against the monotonic one then.
  let base = { databaseMs: 0, at: 0, localMinusMonotonic: 0 };
  let measuring: Promise<void> | undefined;
  // A jump is measured again at most once a second: a database that does not answer is not asked per call.
  let jumpMeasuredAt = -Infinity;
  async function measure(): Promise<void> {
    const before = monotonicNow();
    const databaseMs = await readDatabaseMs();
    const after = monotonicNow();
    // The database read its clock somewhere in the round trip: take its middle.
    const at = (before + after) / 2;
    base = { databaseMs, at, localMinusMonotonic: localNow() - monotonicNow() };
  }
  function sync(): Promise<void> {
    measuring ??= measure().finally(() => (measuring = undefined));
    return measuring;
  }
  await sync();
  const timer = setInterval(() => {
    sync().catch((error) => options.onError?.(error));
  }, options.refreshMs ?? DATABASE_CLOCK_REFRESH_MS);
  timer.unref();
  function now(): number {
    const monotonic = monotonicNow();
    const jumped = Math.abs(localNow() - monotonic - base.localMinusMonotonic) > JUMP_MS;
    if (jumped && measuring === undefined && monotonic - jumpMeasuredAt >= JUMP_MS) {
      jumpMeasuredAt = monotonic;
      // Until the new measure lands, the monotonic clock carries on from the last one.
      sync().catch((error) => options.onError?.(error));
    }
    return Math.round(base.databaseMs + (monotonic - base.at));
  }
  return {
    now,
    sync,
    get offsetMs() {
      return now() - localNow();
    },
    stop: () => clearInterval(timer),
  };
}
