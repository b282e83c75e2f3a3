/**
 * The delivery worker: claims due deliveries from the outbox, posts them (signed when they carry a
 * secret), records every attempt and applies the retry table. Several processes may run one each.
 *
 * Deliveries of runs that end in this process skip the claim: they are inserted already leased to this
 * worker (`handOff.lease`) and given to it once committed (`handOff.take`).
 *
 * An attempt is sent once, by the one claim that holds it: it is counted (before it is sent) only while
 * this worker's lease still holds the delivery until the attempt's timeout, its outcome is written only
 * while the lease is still this worker's, and the worker never claims again a delivery it holds (waiting,
 * in flight, or its outcome still being recorded through an outage), whatever the delivery's lease says.
 */
import { randomBytes } from "node:crypto";
import type { Kysely } from "kysely";
import { LightAbortController } from "../abort/mod.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import { startTicker } from "../ticker/mod.ts";
import type { GuardOptions } from "./destination_guard.ts";
import {
  claimDueDeliveries,
  type ClaimedDelivery,
  type DeliveryLease,
  postponeDue,
  settleInterruptedAttempts,
  snoozeDeliveries,
} from "./outbox.ts";
import { DeliveryAttempts } from "./_delivery_attempt.ts";
import { DeliveryQueue, type ReadyDelivery } from "./_delivery_queue.ts";
import { SlowDestinations } from "./_slow_destinations.ts";
import { MAX_ATTEMPTS } from "./retry_policy.ts";
import { webhookHeaderNames } from "./signer.ts";

/** What the worker needs. */
export interface DeliveryWorkerOptions {
  db: Kysely<Database>;
  secrets: SecretBox;
  logger: Logger;
  /** `RUNPLANE_WEBHOOK_HEADER_VENDOR`. */
  headerVendor: string;
  /** Per-attempt timeout. */
  timeoutMs: number;
  /** Pause between attempts (at most 5 s). */
  retryDelayMs: number;
  guard: GuardOptions;
  /** Where attempts (by outcome: delivered, retry, failed, refused) and delivery latency are recorded. */
  metrics?: Pick<Metrics, "webhookAttempts" | "webhookDeliveryLatency">;
  /** This process's lease owner id (shared with the run service, so a restart can free a dead process's leases). */
  owner?: string;
  /** How often the outbox is polled when nothing woke the worker (default 500 ms). */
  pollMs?: number;
  /** Most attempts in flight at once (default 128). */
  maxInFlight?: number;
  /**
   * Most attempts in flight at once to one destination (scheme, host and port; default 64, half the
   * window): a receiver that hangs holds that many of the window, not all of it, so the others'
   * deliveries go on, while one fast receiver alone still gets as many as a window of 64 gave it.
   */
  perDestination?: number;
  /**
   * The store's wake-ups: one on `runplane_deliveries` (another process enqueued a delivery) makes the
   * worker look at the outbox at once, as `wake()` does; the poll stays the fallback.
   */
  wakeUps?: Pick<Notifier, "listen">;
  /** The store's clock, which decides the outbox's leases (default the process's). */
  now?: () => number;
}

/**
 * Deliveries handed to the worker of this process straight from the transaction that stored them. The
 * worker's queue is bounded: when `lease` says no, store the delivery unleased and `wake()` the worker.
 */
export interface DeliveryHandOff {
  /**
   * A lease to insert one more delivery to `endpoint` with, or null when the worker's queue is full or
   * its destination is (`perDestination` in flight and as many waiting).
   */
  lease(now: number, endpoint: string): DeliveryLease | null;
  /** Attempts deliveries that were committed with a lease from `lease()`. */
  take(deliveries: readonly ClaimedDelivery[]): void;
}

/** A running delivery worker. */
export interface DeliveryWorker {
  /** Looks at the outbox now (call after enqueuing a delivery). */
  wake(): void;
  /** Where the run service hands this process's deliveries (see `DeliveryHandOff`). */
  handOff: DeliveryHandOff;
  /** Stops claiming; attempts in flight are abandoned with no outcome recorded and retried once their lease ends. */
  stop(): Promise<void>;
}

/** How long a delivery put back for a busy destination waits before it is due again. */
const SNOOZE_MS = 1000;

/** Starts a worker that runs until `stop()`. */
export function startDeliveryWorker(options: DeliveryWorkerOptions): DeliveryWorker {
  const owner = options.owner ?? `dw_${randomBytes(8).toString("hex")}`;
  const names = webhookHeaderNames(options.headerVendor);
  const leaseMs = options.timeoutMs + 10_000;
  const maxInFlight = options.maxInFlight ?? 128;
  const perDestination = Math.min(options.perDestination ?? 64, maxInFlight);
  const clock = options.now ?? Date.now;
  // Every attempt in flight listens to it (through its deadline): a light one, no listener limit.
  const stopping = new LightAbortController();
  // More deliveries may be due (the last claim was full, or left a busy destination out): a finished
  // attempt claims again.
  let backlog = false;
  const attempts = new DeliveryAttempts({
    ...options,
    names,
    owner,
    clock,
    signal: stopping.signal,
    wakeAfter: (ms) => ticker.wakeAfter(ms),
  });
  const queue = new DeliveryQueue({ ...options, maxInFlight, perDestination, clock, signal: stopping.signal });
  const slow = new SlowDestinations({ ...options, clock, wake: () => ticker.wake() });

  function start(entry: ReadyDelivery): void {
    const { delivery, destination } = entry;
    queue.began(entry);
    slow.began(destination);
    let released = false;
    function release(answered = false): void {
      if (released) return;
      released = true;
      queue.ended(entry);
      slow.ended(destination, queue.busy(destination), answered);
      pump();
      if (backlog) ticker.wake();
    }
    attempts.attempt(delivery, release)
      .catch((error) =>
        options.logger.error({ run_id: delivery.run_id, err: error }, "webhook attempt could not be recorded")
      )
      .finally(() => {
        // Its outcome is recorded (or given up): from now on the delivery may be claimed again.
        queue.mine.delete(delivery.run_id);
        release();
      });
  }

  /**
   * Starts what the window and the destinations have room for, oldest first. Past what its destination
   * may start soon (`perDestination` more), a delivery goes back to the outbox, due again a little
   * later: the window and the claims stay free for the other destinations.
   */
  function pump(): void {
    const snoozed = queue.pump(start);
    if (snoozed.length) {
      snoozeDeliveries(options.db, { runIds: snoozed, owner, dueAt: clock() + SNOOZE_MS }).catch((error) =>
        options.logger.warn({ err: error }, "deliveries to a busy destination not put back; their leases will end")
      );
    }
  }

  async function tick(): Promise<void> {
    const room = queue.room();
    if (room <= 0) {
      // Woken with a full window: look again as soon as an attempt finishes.
      backlog = true;
      return;
    }
    const now = clock();
    // A busy destination's deliveries are not claimed: they would only go back to the outbox.
    const skipEndpoints = queue.busyEndpoints();
    const postponement = slow.postponing(skipEndpoints, now);
    if (postponement) {
      await postponeDue(options.db, { endpoints: postponement.endpoints, now, dueAt: postponement.dueAt });
    }
    const limit = Math.min(room, 32);
    const skipRuns = queue.mine;
    const due = await claimDueDeliveries(options.db, { owner, now, leaseMs, limit, skipEndpoints, skipRuns });
    // More may be due: the claim was full, or it left a busy destination's out (claim again as it frees).
    backlog = due.length === limit || skipEndpoints.length > 0;
    const claimed = await settleInterruptedAttempts(options.db, due, { maxAttempts: MAX_ATTEMPTS, now, owner });
    for (const delivery of claimed) queue.enqueue(delivery, now + leaseMs);
    pump();
  }

  const handOff: DeliveryHandOff = {
    lease(now, endpoint) {
      // `now` is the store's clock (the delivery's created_at), as the lease's end is.
      return queue.full(endpoint) || stopping.signal.aborted ? null : { owner, expiresAt: now + leaseMs };
    },
    take(deliveries) {
      for (const delivery of deliveries) queue.enqueue(delivery, delivery.created_at + leaseMs);
      pump();
    },
  };

  const ticker = startTicker(tick, {
    intervalMs: options.pollMs ?? 500,
    onError: (error) => options.logger.error({ err: error }, "webhook outbox poll failed"),
  });

  const stopListening = options.wakeUps?.listen("runplane_deliveries", () => ticker.wake());

  return {
    wake: ticker.wake,
    handOff,
    async stop() {
      stopListening?.();
      stopping.abort();
      await ticker.stop();
    },
  };
}
