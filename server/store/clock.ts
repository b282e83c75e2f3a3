/**
 * The store's clock: the time that decides ownership (leases, expiry). On SQLite (one host) it is the
 * process's clock; on PostgreSQL it is the database server's, so processes on hosts with skewed clocks
 * still agree on when a lease ran out. Reading the database on every call would cost a round trip, so
 * the clock keeps the offset between the database's clock and the process's, measured at start and
 * refreshed periodically.
 */

/** Unix milliseconds, as the store's engine sees them. */
export interface StoreClock {
  /** The current time in whole Unix milliseconds. */
  now(): number;
  /** Measures the offset to the database's clock again (a no-op for the process's clock). */
  sync(): Promise<void>;
  /** The last measured offset: the database's clock minus the process's, in milliseconds. */
  readonly offsetMs: number;
  /** Stops the periodic refresh. */
  stop(): void;
}

/** The process's own clock (SQLite: one host, one clock). */
export function systemClock(): StoreClock {
  return { now: () => Date.now(), sync: () => Promise.resolve(), offsetMs: 0, stop() {} };
}

/** Options of `startDatabaseClock`. */
export interface DatabaseClockOptions {
  /** How often the offset is measured again, in milliseconds (default 30 s). */
  refreshMs?: number;
  /** The process's clock (default `Date.now`); tests give a skewed one. */
  localNow?: () => number;
  /** Called when a refresh failed; the last offset stays in use. */
  onError?(error: unknown): void;
}

/**
 * A clock that follows the database's: `readDatabaseMs` reads the database's time in Unix
 * milliseconds. Measures once before resolving (throws if that fails), then every `refreshMs`.
 */
export async function startDatabaseClock(
  readDatabaseMs: () => Promise<number>,
  options: DatabaseClockOptions = {},
): Promise<StoreClock> {
  const localNow = options.localNow ?? Date.now;
  let offsetMs = 0;
  async function sync(): Promise<void> {
    const before = localNow();
    const databaseMs = await readDatabaseMs();
    const after = localNow();
    // The database read its clock somewhere in the round trip: take its middle.
    offsetMs = databaseMs - (before + after) / 2;
  }
  await sync();
  const timer = setInterval(() => {
    sync().catch((error) => options.onError?.(error));
  }, options.refreshMs ?? 30_000);
  timer.unref();
  return {
    now: () => Math.round(localNow() + offsetMs),
    sync,
    get offsetMs() {
      return offsetMs;
    },
    stop: () => clearInterval(timer),
  };
}
