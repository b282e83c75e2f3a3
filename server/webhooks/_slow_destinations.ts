/**
 * The delivery worker's slow destinations (see delivery_worker.ts): a full destination that has not
 * answered for `SLOW_AFTER_MS` has its due deliveries postponed until its attempts time out, and put back
 * in line as soon as it answers.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { destinationOf } from "./_delivery_queue.ts";
import { restoreDue } from "./outbox.ts";

/**
 * A full destination that has not answered for this long is slow: its due deliveries are postponed
 * until its attempts time out, and put back in line as soon as it answers. A misjudged one (a burst's
 * first answers are merely slower than this) costs two small updates; a dead one judged late costs a
 * claim that reads past all its due deliveries for as long as it is not postponed.
 */
const SLOW_AFTER_MS = 500;

/** What `SlowDestinations` needs. */
export interface SlowDestinationsOptions {
  db: Kysely<Database>;
  logger: Logger;
  /** Per-attempt timeout. */
  timeoutMs: number;
  /** The store's clock. */
  clock: () => number;
  /** Looks at the outbox now. */
  wake(): void;
}

/** Due deliveries to postpone: their endpoints, and when they are due again. */
export interface Postponement {
  endpoints: string[];
  dueAt: number;
}

/** When each busy destination last answered, and which slow ones had their deliveries postponed. */
export class SlowDestinations {
  readonly #options: SlowDestinationsOptions;
  // Slow destinations whose due deliveries were postponed: their endpoints and the time they are due
  // again (when the attempts in flight have timed out), until then or until the destination answers.
  readonly #postponed = new Map<string, Postponement>();
  // When each busy destination last answered (or became busy): one that is full and has not answered
  // for `SLOW_AFTER_MS` is slow, not merely busy.
  readonly #answeredAt = new Map<string, number>();

  constructor(options: SlowDestinationsOptions) {
    this.#options = options;
  }

  /** An attempt to `destination` began. */
  began(destination: string): void {
    if (!this.#answeredAt.has(destination)) this.#answeredAt.set(destination, performance.now());
  }

  /** An attempt to `destination` ended; it is still `busy` with others; it `answered` or not. */
  ended(destination: string, busy: boolean, answered: boolean): void {
    if (busy) this.#answeredAt.set(destination, performance.now());
    else this.#answeredAt.delete(destination);
    if (answered) this.#restore(destination);
  }

  /** Puts a postponed destination's deliveries back in line: it answered, so it is not dead. */
  #restore(destination: string): void {
    const entry = this.#postponed.get(destination);
    if (!entry) return;
    this.#postponed.delete(destination);
    const { db, logger, clock, wake } = this.#options;
    restoreDue(db, { endpoints: entry.endpoints, postponedTo: entry.dueAt, now: clock() })
      .then((restored) => {
        if (restored) wake();
      })
      .catch((error) =>
        logger.warn({ err: error }, "postponed deliveries not put back in line; they are due after the timeout")
      );
  }

  /**
   * Of the busy endpoints `skipEndpoints`, those whose destination is slow and not postponed now: they
   * are marked postponed until `now` plus the attempt's timeout; null when there are none.
   */
  postponing(skipEndpoints: readonly string[], now: number): Postponement | null {
    // A slow destination's due deliveries would stay at the head of the due index, read past by every
    // claim: move them out of the way until its attempts in flight may have ended (once per timeout at
    // most, per destination; its first answer puts them back). A fast one that is merely full keeps its
    // place in line.
    const slow = new Map<string, string[]>();
    for (const endpoint of skipEndpoints) {
      const destination = destinationOf(endpoint);
      const silentFor = performance.now() - (this.#answeredAt.get(destination) ?? Infinity);
      if (silentFor < SLOW_AFTER_MS || (this.#postponed.get(destination)?.dueAt ?? -Infinity) > now) continue;
      const endpoints = slow.get(destination);
      if (endpoints) endpoints.push(endpoint);
      else slow.set(destination, [endpoint]);
    }
    if (!slow.size) return null;
    const dueAt = now + this.#options.timeoutMs;
    for (const [destination, endpoints] of slow) this.#postponed.set(destination, { endpoints, dueAt });
    return { endpoints: [...slow.values()].flat(), dueAt };
  }
}
