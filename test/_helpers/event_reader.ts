/** Reads a server-sent-event response in a test: each event's name and data, as they arrive. */
import { readServerEvents } from "../../client/event_stream.ts";

/** A followed event stream: the events so far, a wait for one that matches, and the way to stop. */
export interface FollowedEvents {
  events: Array<{ event: string; data: string }>;
  /** Resolves with the first event (already received or to come) that `match` accepts; rejects after `timeoutMs`. */
  waitFor(
    match: (e: { event: string; data: string }) => boolean,
    timeoutMs?: number,
  ): Promise<{ event: string; data: string }>;
  stop(): void;
}

/** Opens `url` with `headers` as an event stream and collects its events. */
export async function followEvents(url: string, headers: Record<string, string>): Promise<FollowedEvents> {
  const controller = new AbortController();
  const response = await fetch(url, {
    headers: { ...headers, Accept: "text/event-stream" },
    signal: controller.signal,
  });
  if (response.status !== 200 || !response.body) {
    throw new Error(`${url} answered ${response.status}: ${await response.text()}`);
  }
  const events: Array<{ event: string; data: string }> = [];
  const waiters = new Set<() => void>();
  void (async () => {
    try {
      for await (const event of readServerEvents(response.body!)) {
        events.push(event);
        for (const waiter of waiters) waiter();
      }
    } catch {
      // Stopped.
    }
  })();
  return {
    events,
    waitFor(match, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = events.find(match);
          if (!found) return false;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(found);
          return true;
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`No matching event after ${timeoutMs} ms; got ${JSON.stringify(events)}`));
        }, timeoutMs);
        if (!check()) waiters.add(check);
      });
    },
    stop: () => controller.abort(),
  };
}
