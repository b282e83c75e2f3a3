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
import type { Notifier } from "../store/mod.ts";
import { ChangeOutbox } from "./_change_outbox.ts";
import { ChangeSubscribers } from "./_change_subscribers.ts";
import type { RunChange, RunChangeListener } from "./_change_types.ts";
import { WatchedProjects } from "./_watched_projects.ts";

export type { RunChange, RunChangeListener } from "./_change_types.ts";

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
  const { notifier, logger } = options;
  const flushMs = options.flushMs ?? 100;
  const renewMs = options.renewMs ?? 10_000;
  const watchTtlMs = options.watchTtlMs ?? 30_000;
  const settleMs = options.settleMs ?? 1_000;
  const listeners = new Map<string, Set<RunChangeListener>>();
  const watch = new WatchedProjects({ notifier, logger, watchTtlMs, settleMs, followedHere: listeners });
  const subscribers = new ChangeSubscribers({ notifier, logger, listeners, watch, renewMs, settleMs });
  const outbox = new ChangeOutbox({ notifier, logger, watch, flushMs });
  const stopListening = subscribers.listen();
  const stopWatchListening = watch.listen();

  return {
    watches: (projectId) => watch.watched(projectId),
    publish: (change) => outbox.publish(change),
    subscribe: (projectId, listener) => subscribers.subscribe(projectId, listener),
    async close() {
      outbox.stopTimer();
      subscribers.stopTimers();
      await outbox.flush();
      stopListening();
      stopWatchListening();
      subscribers.deliver("closed");
    },
  };
}
