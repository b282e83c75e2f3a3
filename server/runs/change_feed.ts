/**
 * Run changes as they happen, for pages that never poll: each run's creation, start and end in a
 * project, from every process sharing the store. Changes are batched (one wake-up per `flushMs`, a JSON
 * array under PostgreSQL's NOTIFY limit) on `runplane_run_events`, so a busy process adds a few small
 * NOTIFYs a second, not one per status change; on SQLite the wake-up stays in the process.
 */
import type { Logger } from "../log.ts";
import { MAX_WAKE_PAYLOAD_BYTES, type Notifier } from "../store/mod.ts";

/** One change of one run. */
export interface RunChange {
  run_id: string;
  project_id: string;
  app_id: string;
  function_name: string;
  mode: string;
  status: string;
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
  /**
   * Calls `listener` with each change of `projectId`'s runs, with `"missed"` when changes may have been
   * missed (a lost database connection), and with `"closed"` when the server stops; returns the function
   * that stops it.
   */
  subscribe(projectId: string, listener: RunChangeListener): () => void;
  /** Sends what is pending and stops. */
  close(): Promise<void>;
}

/** Creates the feed over `notifier`. */
export function createRunChangeFeed(
  options: { notifier: Pick<Notifier, "notify" | "listen">; logger: Logger; flushMs?: number },
): RunChangeFeed {
  const flushMs = options.flushMs ?? 100;
  const listeners = new Map<string, Set<RunChangeListener>>();
  let pending: RunChange[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;

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
    publish(change) {
      pending.push(change);
      timer ??= setTimeout(() => void flush(), flushMs);
    },
    subscribe(projectId, listener) {
      let set = listeners.get(projectId);
      if (!set) listeners.set(projectId, set = new Set());
      set.add(listener);
      return () => {
        set.delete(listener);
        if (set.size === 0) listeners.delete(projectId);
      };
    },
    async close() {
      if (timer) clearTimeout(timer);
      await flush();
      stopListening();
      deliver("closed");
    },
  };
}
