/**
 * The delivery worker's window (see delivery_worker.ts): the deliveries it holds, those waiting for room
 * and those in flight, counted by destination, and which of them may start now.
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import type { ClaimedDelivery } from "./outbox.ts";

/** Where a delivery goes: its endpoint's scheme, host and port. */
export function destinationOf(endpoint: string): string {
  try {
    return new URL(endpoint).origin;
  } catch {
    return endpoint;
  }
}

/** A delivery waiting for room in the window, with its lease's end. */
export interface ReadyDelivery {
  delivery: ClaimedDelivery;
  leaseEnds: number;
  destination: string;
}

/** What `DeliveryQueue` needs. */
export interface DeliveryQueueOptions {
  /** Most attempts in flight at once. */
  maxInFlight: number;
  /** Most attempts in flight at once to one destination. */
  perDestination: number;
  /** Per-attempt timeout. */
  timeoutMs: number;
  /** The store's clock. */
  clock: () => number;
  /** Aborted when the worker stops: nothing more starts. */
  signal: AbortSignalLike;
}

function count(counts: Map<string, number>, destination: string, by: number): void {
  const value = (counts.get(destination) ?? 0) + by;
  if (value) counts.set(destination, value);
  else counts.delete(destination);
}

/** The deliveries one worker holds, waiting or in flight. */
export class DeliveryQueue {
  readonly #options: DeliveryQueueOptions;
  // The deliveries this worker holds, from their claim or hand-off until their attempt's outcome is
  // recorded (or they go back to the outbox): never claimed again meanwhile. An outage longer than the
  // lease once let the worker claim a delivery whose attempt it was still recording, and send it twice.
  readonly mine = new Set<string>();
  // Claimed and handed-off deliveries wait here for room in the window (and at their destination), with
  // their lease's end.
  readonly #ready: ReadyDelivery[] = [];
  // Attempts in flight, and deliveries in `ready`, by destination.
  readonly #busy = new Map<string, number>();
  readonly #waiting = new Map<string, number>();
  // Endpoints of the attempts in flight, to leave a busy destination's deliveries out of the claims.
  readonly #endpointsInFlight = new Map<string, number>();
  #inFlight = 0;
  // Handed-off deliveries waiting for the window; past it, new ones stay in the outbox to be claimed.
  readonly #maxReady: number;

  constructor(options: DeliveryQueueOptions) {
    this.#options = options;
    this.#maxReady = options.maxInFlight * 2;
  }

  /** Whether `destination` has `perDestination` attempts in flight. */
  saturated(destination: string): boolean {
    return (this.#busy.get(destination) ?? 0) >= this.#options.perDestination;
  }

  /** Whether `destination` has an attempt in flight. */
  busy(destination: string): boolean {
    return this.#busy.has(destination);
  }

  /**
   * Whether a delivery to `endpoint` handed off now would find the queue full, or its destination
   * (`perDestination` in flight and as many waiting).
   */
  full(endpoint: string): boolean {
    const destination = destinationOf(endpoint);
    return this.#ready.length >= this.#maxReady
      || (this.saturated(destination) && (this.#waiting.get(destination) ?? 0) >= this.#options.perDestination);
  }

  /** Holds `delivery` until its attempt's outcome is recorded; it waits for room meanwhile. */
  enqueue(delivery: ClaimedDelivery, leaseEnds: number): void {
    const destination = destinationOf(delivery.endpoint);
    this.mine.add(delivery.run_id);
    this.#ready.push({ delivery, leaseEnds, destination });
    count(this.#waiting, destination, 1);
  }

  #dequeue(index: number): ReadyDelivery {
    const [entry] = this.#ready.splice(index, 1);
    count(this.#waiting, entry.destination, -1);
    return entry;
  }

  /** Counts `entry`'s attempt in flight. */
  began(entry: ReadyDelivery): void {
    this.#inFlight++;
    count(this.#busy, entry.destination, 1);
    count(this.#endpointsInFlight, entry.delivery.endpoint, 1);
  }

  /** Its attempt is no longer in flight. */
  ended(entry: ReadyDelivery): void {
    this.#inFlight--;
    count(this.#busy, entry.destination, -1);
    count(this.#endpointsInFlight, entry.delivery.endpoint, -1);
  }

  /**
   * Starts what the window and the destinations have room for, oldest first; returns the run ids of the
   * deliveries past what their destination may start soon (`perDestination` more), no longer held, to be
   * put back in the outbox.
   */
  pump(start: (entry: ReadyDelivery) => void): string[] {
    const { maxInFlight, perDestination } = this.#options;
    const ready = this.#ready;
    const kept = new Map<string, number>();
    const snoozed: string[] = [];
    for (let i = 0; i < ready.length && !this.#options.signal.aborted;) {
      const entry = ready[i];
      // Too close to its lease's end, another process may claim it as well: leave it to the outbox.
      if (this.#options.clock() + this.#options.timeoutMs >= entry.leaseEnds) {
        this.mine.delete(this.#dequeue(i).delivery.run_id);
      } else if (this.#inFlight < maxInFlight && !this.saturated(entry.destination)) {
        start(this.#dequeue(i));
      } else if (this.saturated(entry.destination) && (kept.get(entry.destination) ?? 0) >= perDestination) {
        const runId = this.#dequeue(i).delivery.run_id;
        this.mine.delete(runId);
        snoozed.push(runId);
      } else {
        count(kept, entry.destination, 1);
        i++;
      }
    }
    return snoozed;
  }

  /** Room in the window for claimed deliveries: what neither the attempts in flight nor `ready` take. */
  room(): number {
    return this.#options.maxInFlight - this.#inFlight - this.#startable();
  }

  /** Deliveries in `ready` that could start once the window has room (their destination has room). */
  #startable(): number {
    let count = 0;
    for (const entry of this.#ready) if (!this.saturated(entry.destination)) count++;
    return count;
  }

  /** The endpoints of the attempts in flight whose destination is saturated. */
  busyEndpoints(): string[] {
    return [...this.#endpointsInFlight.keys()].filter((endpoint) => this.saturated(destinationOf(endpoint)));
  }
}
