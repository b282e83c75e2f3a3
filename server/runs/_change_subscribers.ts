/**
 * The run-change feed's subscribers in this process: each project's pages, the changes (and `missed`,
 * `closed`) delivered to them from `runplane_run_events`, the renewed word that a project is followed
 * while any of its pages is open, and the `missed` that tells a new page to read again once the other
 * processes heard of it.
 */
import type { Logger } from "../log.ts";
import type { Notifier } from "../store/mod.ts";
import type { RunChange, RunChangeListener } from "./_change_types.ts";
import type { WatchedProjects } from "./_watched_projects.ts";

/** What `ChangeSubscribers` needs. */
export interface ChangeSubscribersOptions {
  notifier: Pick<Notifier, "listen">;
  logger: Logger;
  /** The subscribers by project id (read by `watch` too: a project followed here is watched). */
  listeners: Map<string, Set<RunChangeListener>>;
  /** Where a followed project is said. */
  watch: Pick<WatchedProjects, "say">;
  /** How often a project followed here is said again. */
  renewMs: number;
  /** How long after subscribing a page is told to read again. */
  settleMs: number;
}

/** This process's subscribers to run changes. */
export class ChangeSubscribers {
  readonly #options: ChangeSubscribersOptions;
  readonly #renewals = new Map<string, ReturnType<typeof setInterval>>();
  readonly #settles = new Set<ReturnType<typeof setTimeout>>();

  constructor(options: ChangeSubscribersOptions) {
    this.#options = options;
  }

  /** Tells `change` to the subscribers of `projectId`, or to every subscriber without one. */
  deliver(change: RunChange | "missed" | "closed", projectId?: string): void {
    const { listeners } = this.#options;
    const targets = projectId === undefined ? [...listeners.values()] : [listeners.get(projectId)];
    for (const set of targets) for (const listener of set ?? []) listener(change);
  }

  /** Listens to the changes sent on `runplane_run_events`; returns the function that stops listening. */
  listen(): () => void {
    const { notifier, logger } = this.#options;
    return notifier.listen("runplane_run_events", (payload) => {
      if (payload === undefined) return this.deliver("missed");
      try {
        for (const change of JSON.parse(payload) as RunChange[]) this.deliver(change, change.project_id);
      } catch (error) {
        logger.warn({ err: error }, "a run-change wake-up did not parse");
      }
    });
  }

  /** Calls `listener` with each change of `projectId`'s runs (see `RunChangeFeed.subscribe`). */
  subscribe(projectId: string, listener: RunChangeListener): () => void {
    const { listeners, watch, renewMs, settleMs } = this.#options;
    const renewals = this.#renewals;
    const settles = this.#settles;
    let set = listeners.get(projectId);
    if (!set) {
      // Watched here from now on (`watched` reads `listeners`); the other processes from when they hear it.
      listeners.set(projectId, set = new Set());
      watch.say(projectId);
      const renewal = setInterval(() => watch.say(projectId), renewMs);
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
  }

  /** Stops the renewals and the pending `missed` of new pages. */
  stopTimers(): void {
    for (const renewal of this.#renewals.values()) clearInterval(renewal);
    for (const settle of this.#settles) clearTimeout(settle);
  }
}
