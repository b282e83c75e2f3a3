/**
 * The store being away: which errors mean the database is unreachable, overloaded or full (as opposed
 * to a statement's bug), and the one record of an outage: it is logged once when it starts and once,
 * with the count of requests answered 503 `store-unavailable` meanwhile (counted in one place: where the
 * HTTP layer answers them), when a probe finds the store writable again. Meanwhile operations answer 503
 * `store-unavailable` and `/readyz` says the store cannot write. A full store (a full disk, a read-only
 * server) ends only once it stayed writable for a while after a probe wrote: a small probe fits where
 * real work does not, and availability flapped every probe while the disk stayed full.
 */
import type { Logger } from "../log.ts";

/**
 * PostgreSQL SQLSTATEs of a store that is away rather than a statement that is wrong: connection
 * exceptions (class 08), the server shutting down or starting (57P01–57P03), a statement timeout or
 * cancel (57014), too many connections (53300), disk full (53100), out of memory (53200), an I/O error
 * (58030), and a read-only server (25006: a standby after a failover).
 */
const POSTGRES_CODES = new Set(["57P01", "57P02", "57P03", "57014", "53300", "53100", "53200", "58030", "25006"]);

/** Socket errors of a connection to the store that failed or broke. */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "ENOTFOUND",
]);

/** pg's own errors for a connection that broke or could not be had (they carry no code). */
const POSTGRES_CLIENT_MESSAGES = [
  "Connection terminated",
  "timeout exceeded when trying to connect",
  "Client has encountered a connection error and is not queryable",
  "Connection refused",
];

/** SQLite's result codes of a store that cannot write now: disk full, busy past its timeout, I/O errors. */
function sqliteUnavailable(code: string): boolean {
  return code === "SQLITE_FULL" || code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_IOERR");
}

/** Codes of a store that answers but cannot write: a full disk, a read-only server (a standby). */
const FULL_CODES = new Set(["SQLITE_FULL", "53100", "25006"]);

function unavailableHere(error: unknown): string | null {
  if (typeof error !== "object" || error === null) return null;
  const { code, message } = error as { code?: unknown; message?: unknown };
  if (typeof code === "string") {
    if (POSTGRES_CODES.has(code) || code.startsWith("08")) return `PostgreSQL ${code}: ${String(message)}`;
    if (NETWORK_CODES.has(code)) return `${code} from the database`;
    if (sqliteUnavailable(code)) return `SQLite ${code}: ${String(message)}`;
  }
  if (typeof message === "string" && POSTGRES_CLIENT_MESSAGES.some((text) => message.startsWith(text))) {
    return message;
  }
  return null;
}

/**
 * Why `error` means the store is unavailable (a short reason for the log), or null when it is some
 * other error. Looks through `cause` chains and aggregated errors (a connection refused on every
 * address of a host name).
 */
export function storeUnavailableReason(error: unknown): string | null {
  for (let current = error, depth = 0; current !== undefined && current !== null && depth < 8; depth++) {
    const reason = unavailableHere(current);
    if (reason !== null) return reason;
    if (current instanceof AggregateError) {
      for (const inner of current.errors) {
        const innerReason = unavailableHere(inner);
        if (innerReason !== null) return innerReason;
      }
    }
    current = (current as { cause?: unknown }).cause;
  }
  return null;
}

/** Whether `error` (or a cause) is a store that answers but cannot write: a full disk, a read-only server. */
function storeIsFull(error: unknown): boolean {
  for (let current = error, depth = 0; typeof current === "object" && current !== null && depth < 8; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string" && FULL_CODES.has(code)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/** This process's view of whether the store is away. */
export interface StoreOutage {
  /** Whether an outage is going on (since the first refused operation, until a probe wrote). */
  readonly active: boolean;
  /** The reason of the outage going on, or null. */
  readonly reason: string | null;
  /**
   * Whether the outage is a store that answers but cannot write (a full disk, a read-only server):
   * work that would only be recorded later (a sync call) is refused up front. An unreachable or
   * exhausted store refuses such work by itself, and partly: a gate would refuse what still works.
   */
  readonly refusesWrites: boolean;
  /**
   * Whether `error` is the store being away. If so the first such error starts an outage (logged once)
   * and the probes that end it, and each keeps it going (not counted: see `answered`).
   */
  refused(error: unknown): boolean;
  /** Counts one request answered 503 `store-unavailable`: the count the outage's end reports. */
  answered(): void;
  /** Stops the probes. */
  close(): void;
}

/** Options of `createStoreOutage`. */
export interface StoreOutageOptions {
  logger: Logger;
  /** A small write; resolves when the store took it. */
  probe(): Promise<void>;
  /** How often an outage is probed (default 1 s). */
  probeMs?: number;
  /**
   * How long no operation may have been refused before a probe that wrote ends the outage (default 2 s): a
   * nearly full disk takes a probe's small write but not a run's. A full store must moreover stay that
   * long without a refusal after a probe wrote (work is let through meanwhile), or it stays full.
   */
  quietMs?: number;
}

/** Creates the outage record of this process's store. */
export function createStoreOutage(options: StoreOutageOptions): StoreOutage {
  const probeMs = options.probeMs ?? 1_000;
  const quietMs = options.quietMs ?? 2_000;
  let reason: string | null = null;
  let refusesWrites = false;
  // The outage saw the store answer but refuse to write (full): its end is confirmed (see `probe`).
  let full = false;
  // When a probe of a full store wrote, and no refusal came since: the outage ends once it is quietMs old.
  let confirmingSince: number | null = null;
  let startedAt = 0;
  let lastRefusedAt = 0;
  let answeredCount = 0;
  let timer: NodeJS.Timeout | undefined;
  let probing = false;

  async function probe(): Promise<void> {
    if (probing || reason === null || performance.now() - lastRefusedAt < quietMs) return;
    probing = true;
    try {
      await options.probe();
    } catch (error) {
      if (storeUnavailableReason(error) !== null) lastRefusedAt = performance.now();
      else options.logger.warn({ err: error }, "the store's probe failed");
      return;
    } finally {
      probing = false;
    }
    const now = performance.now();
    if (full && (confirmingSince === null || now - confirmingSince < quietMs)) {
      // Work is let through again; a refusal within quietMs (its write did not fit where the probe's
      // did) keeps the outage going, unlogged, instead of ending it and starting another.
      confirmingSince ??= now;
      refusesWrites = false;
      return;
    }
    options.logger.warn(
      { refused: answeredCount, duration_ms: Math.round(now - startedAt) },
      "store available again: operations are served",
    );
    reason = null;
    refusesWrites = false;
    full = false;
    confirmingSince = null;
    clearInterval(timer);
    timer = undefined;
  }

  return {
    get active() {
      return reason !== null;
    },
    get reason() {
      return reason;
    },
    get refusesWrites() {
      return refusesWrites;
    },
    refused(error) {
      const why = storeUnavailableReason(error);
      if (why === null) return false;
      lastRefusedAt = performance.now();
      confirmingSince = null;
      if (storeIsFull(error)) full = true;
      if (full) refusesWrites = true;
      if (reason !== null) return true;
      reason = why;
      startedAt = lastRefusedAt;
      answeredCount = 0;
      options.logger.error(
        { err: error, reason: why },
        "store unavailable: operations answer 503 store-unavailable until a probe can write",
      );
      timer = setInterval(() => void probe(), probeMs);
      timer.unref();
      return true;
    },
    answered() {
      if (reason !== null) answeredCount++;
    },
    close() {
      clearInterval(timer);
    },
  };
}

/**
 * `logger`, except that an `error` or `warn` line whose `err` is the store being away goes to `outage`
 * (which logs the outage's start and end) instead of being written: the background loops (the
 * dispatcher, upkeep, the delivery worker, the builder) fail at every tick while the store is away.
 * Made with `Object.create`, so every other method (and `child`) is the logger's own.
 */
export function quietDuringOutages(logger: Logger, outage: Pick<StoreOutage, "refused">): Logger {
  const quiet = Object.create(logger) as Logger;
  for (const level of ["error", "warn"] as const) {
    quiet[level] = ((first: unknown, ...rest: unknown[]) => {
      const error = typeof first === "object" && first !== null ? (first as { err?: unknown }).err : undefined;
      if (error !== undefined && outage.refused(error)) return;
      return (logger[level] as (...args: unknown[]) => void)(first, ...rest);
    }) as Logger["error"];
  }
  return quiet;
}
