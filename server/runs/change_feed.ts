/**
 * Run changes as they happen, for pages that never poll: each run's creation, start and end in a
 * project, from every process sharing the store. Changes are batched (one wake-up per `flushMs`, a JSON
 * array under PostgreSQL's NOTIFY limit) on `runplane_run_events`, so a busy process adds a few small
 * NOTIFYs a second, not one per status change; on SQLite the wake-up stays in the process.
 *
 * Only the changes of watched projects are sent. A process with a page following a project says so on
 * `runplane_run_watch` (the project's id) when the first one opens, every `renewMs` while any is open,
 * and when a process asks (`?`: one that has just started, or whose listening connection was lost);
 * every process sends that project's changes until `watchTtlMs` after the last such word. Sending every
 * change to every process (and PostgreSQL queueing each for all of them) cost more than accepting the
 * runs did: async accept on PostgreSQL rose from 0.63x to 0.79x SQLite's when it stopped. Until the
 * answers are in (`settleMs`; it asks once it listens, and sends everything until then), a process that
 * asked sends every project's changes; and a new page is
 * told to read again (`resync`) once `settleMs` have passed, so that a change sent before every process
 * heard of the page is not missed.
 */
import type { Logger } from "../log.ts";
import { MAX_WAKE_PAYLOAD_BYTES, type Notifier, type RunStatus } from "../store/mod.ts";

/** One change of one run. */
export interface RunChange {
  run_id: string;
  project_id: string;
  app_id: string;
  function_name: string;
  mode: string;
  status: RunStatus;
  /** When it happened (RFC 3339). */
  at: string;
  /** Milliseconds it ran, once it ended. */
  run_time_ms?: number | null;
}

/** What a subscriber is told. */
export type RunChangeListener = (change: RunChange | "missed" | "closed") => void;

/** Publishes changes and lets a project's pages follow them. */
export interface RunChangeFeed {
  publish(change: RunChange): void;
  /** Whether `publish` sends the changes of `projectId`'s runs now (a page here or elsewhere follows it). */
  watches(projectId: string): boolean;
  /**
   * Calls `listener` with each change of `projectId`'s runs, with `"missed"` when changes may have been
   * missed (a lost database connection), and with `"closed"` when the server stops; returns the function
   * that stops it.
   */
  subscribe(projectId: string, listener: RunChangeListener): () => void;
  /** Sends what is pending and stops. */
  close(): Promise<void>;
}

/** The word on `runplane_run_watch` that asks which projects are followed (never a project's id). */
const ASK = "?";

/** Options of `createRunChangeFeed`. */
export interface RunChangeFeedOptions {
  notifier: Pick<Notifier, "notify" | "listen" | "listening">;
  logger: Logger;
  /** How long changes collect before they are sent (default 100 ms). */
  flushMs?: number;
  /** How often a process with pages open says which projects they follow (default 10 s). */
  renewMs?: number;
  /** How long a project stays watched after the last word of it (default 30 s; keep it ≥ 2× `renewMs`). */
  watchTtlMs?: number;
  /**
   * How long the other processes are given to hear of a page or to answer which projects they follow
   * (default 1 s): a new page is told to read again after it; a process that asked sends everything
   * until then.
   */
  settleMs?: number;
}

/** Creates the feed over `notifier`. */
export function createRunChangeFeed(options: RunChangeFeedOptions): RunChangeFeed {
  const flushMs = options.flushMs ?? 100;
  const renewMs = options.renewMs ?? 10_000;
  const watchTtlMs = options.watchTtlMs ?? 30_000;
  const settleMs = options.settleMs ?? 1_000;
  const listeners = new Map<string, Set<RunChangeListener>>();
  let pending: RunChange[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  // Projects followed by a page in some process (this one's included), until when.
  const watchedUntil = new Map<string, number>();
  // Until when every project counts as watched: what is watched elsewhere is not known yet.
  let everythingUntil = 0;
  const renewals = new Map<string, ReturnType<typeof setInterval>>();
  const settles = new Set<ReturnType<typeof setTimeout>>();

  function deliver(change: RunChange | "missed" | "closed", projectId?: string): void {
    const targets = projectId === undefined ? [...listeners.values()] : [listeners.get(projectId)];
    for (const set of targets) for (const listener of set ?? []) listener(change);
  }

  const stopListening = options.notifier.listen("runplane_run_events", (payload) => {
    if (payload === undefined) return deliver("missed");
    try {
      for (const change of JSON.parse(payload) as RunChange[]) deliver(change, change.project_id);
    } catch (error) {
      options.logger.warn({ err: error }, "a run-change wake-up did not parse");
    }
  });

  const stopWatchListening = options.notifier.listen("runplane_run_watch", (word) => {
    if (word === undefined) ask(); // back after a lost connection: words may have been missed
    else if (word === ASK) { for (const projectId of listeners.keys()) say(projectId); }
    else watchedUntil.set(word, performance.now() + watchTtlMs);
  });

  /** Says `word` on `runplane_run_watch`; a word lost only delays what it tells until the next one. */
  function say(word: string): void {
    options.notifier.notify("runplane_run_watch", word).catch((error) =>
      options.logger.warn({ err: error, word }, "a word on which projects are followed was not sent")
    );
  }

  /** Asks every process which projects it follows, and sends everything until the answers are in. */
  function ask(): void {
    everythingUntil = performance.now() + settleMs;
    say(ASK);
  }
  // A word said before this process listens never reaches it (a page opened elsewhere meanwhile, the
  // answers to its question): it sends everything until it listens, and only then asks. CI once had a
  // just-started process miss a page's word this way and send none of a run's changes.
  everythingUntil = Infinity;
  void options.notifier.listening().then(ask);

  function watched(projectId: string): boolean {
    const now = performance.now();
    // A page open here is followed whether or not this process's own word came back.
    if (now < everythingUntil || listeners.has(projectId)) return true;
    const until = watchedUntil.get(projectId);
    if (until === undefined) return false;
    if (until > now) return true;
    watchedUntil.delete(projectId);
    return false;
  }

  /** The pending changes as payloads under the NOTIFY limit. */
  function payloads(changes: RunChange[]): string[] {
    const out: string[] = [];
    let batch: string[] = [];
    let size = 2;
    for (const change of changes) {
      const text = JSON.stringify(change);
      if (size + text.length + 1 > MAX_WAKE_PAYLOAD_BYTES && batch.length) {
        out.push(`[${batch.join(",")}]`);
        batch = [];
        size = 2;
      }
      batch.push(text);
      size += text.length + 1;
    }
    if (batch.length) out.push(`[${batch.join(",")}]`);
    return out;
  }

  async function flush(): Promise<void> {
    timer = undefined;
    const changes = pending;
    pending = [];
    for (const payload of payloads(changes)) {
      await options.notifier.notify("runplane_run_events", payload).catch((error) =>
        options.logger.warn({ err: error }, "announcing run changes failed; pages show them on their next read")
      );
    }
  }

  return {
    watches: watched,
    publish(change) {
      if (!watched(change.project_id)) return;
      pending.push(change);
      timer ??= setTimeout(() => void flush(), flushMs);
    },
    subscribe(projectId, listener) {
      let set = listeners.get(projectId);
      if (!set) {
        // Watched here from now on (`watched` reads `listeners`); the other processes from when they hear it.
        listeners.set(projectId, set = new Set());
        say(projectId);
        const renewal = setInterval(() => say(projectId), renewMs);
        renewal.unref();
        renewals.set(projectId, renewal);
      }
      set.add(listener);
      const settle = setTimeout(() => {
        settles.delete(settle);
        if (set.has(listener)) listener("missed");
      }, settleMs);
      settle.unref();
      settles.add(settle);
      return () => {
        set.delete(listener);
        if (set.size > 0 || listeners.get(projectId) !== set) return;
        listeners.delete(projectId);
        clearInterval(renewals.get(projectId));
        renewals.delete(projectId);
      };
    },
    async close() {
      if (timer) clearTimeout(timer);
      for (const renewal of renewals.values()) clearInterval(renewal);
      for (const settle of settles) clearTimeout(settle);
      await flush();
      stopListening();
      stopWatchListening();
      deliver("closed");
    },
  };
}
