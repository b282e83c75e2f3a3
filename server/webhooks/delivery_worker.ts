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
import { createGroupCommit, type Database, type Notifier, storeUnavailableReason } from "../store/mod.ts";
import { startTicker } from "../ticker/mod.ts";
import type { GuardOptions } from "./destination_guard.ts";
import {
  type AttemptRecord,
  claimDueDeliveries,
  type ClaimedDelivery,
  type DeliveryLease,
  type AttemptStart,
  recordAttemptStarts,
  recordAttempts,
  settleInterruptedAttempts,
  postponeDue,
  restoreDue,
  snoozeDeliveries,
  statusAfter,
} from "./outbox.ts";
import { basicAuthorization } from "./endpoint_credentials.ts";
import { postOnce } from "./_post.ts";
import { judgeAttempt, MAX_ATTEMPTS } from "./retry_policy.ts";
import { signWebhook, webhookHeaderNames } from "./signer.ts";

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

/** Where a delivery goes: its endpoint's scheme, host and port. */
function destinationOf(endpoint: string): string {
  try {
    return new URL(endpoint).origin;
  } catch {
    return endpoint;
  }
}

/**
 * A full destination that has not answered for this long is slow: its due deliveries are postponed
 * until its attempts time out, and put back in line as soon as it answers. A misjudged one (a burst's
 * first answers are merely slower than this) costs two small updates; a dead one judged late costs a
 * claim that reads past all its due deliveries for as long as it is not postponed.
 */
const SLOW_AFTER_MS = 500;

/** How long a delivery put back for a busy destination waits before it is due again. */
const SNOOZE_MS = 1000;

/** The longest pause between tries to record an attempt's outcome while the store is away. */
const MAX_RECORD_RETRY_MS = 5_000;

/** Starts a worker that runs until `stop()`. */
export function startDeliveryWorker(options: DeliveryWorkerOptions): DeliveryWorker {
  const owner = options.owner ?? `dw_${randomBytes(8).toString("hex")}`;
  const names = webhookHeaderNames(options.headerVendor);
  const leaseMs = options.timeoutMs + 10_000;
  const maxInFlight = options.maxInFlight ?? 128;
  const perDestination = Math.min(options.perDestination ?? 64, maxInFlight);
  const clock = options.now ?? Date.now;
  // Handed-off deliveries waiting for the window; past it, new ones stay in the outbox to be claimed.
  const maxReady = maxInFlight * 2;
  // Every attempt in flight listens to it (through its deadline): a light one, no listener limit.
  const stopping = new LightAbortController();
  let inFlight = 0;
  // More deliveries may be due (the last claim was full, or left a busy destination out): a finished
  // attempt claims again.
  let backlog = false;
  // Slow destinations whose due deliveries were postponed: their endpoints and the time they are due
  // again (when the attempts in flight have timed out), until then or until the destination answers.
  const postponed = new Map<string, { endpoints: string[]; dueAt: number }>();
  // When each busy destination last answered (or became busy): one that is full and has not answered
  // for `SLOW_AFTER_MS` is slow, not merely busy.
  const answeredAt = new Map<string, number>();
  // Attempts that end within 10 ms of each other are recorded in one transaction. Until it commits, the
  // delivery's lease holds it: a crash in between means one more attempt, never a lost one.
  const records = createGroupCommit<AttemptRecord>((batch) => recordAttempts(options.db, batch, { owner }), {
    delayMs: 10,
  });
  // An attempt is counted in the store before it is sent: one killed mid-attempt is not lost from the
  // record while the receiver got it. Starts of the same event-loop turn share one commit. Counted only
  // while this worker holds the delivery long enough for the attempt (else it is not sent).
  const starts = createGroupCommit<AttemptStart>((batch) => recordAttemptStarts(options.db, batch, { owner }));
  // The deliveries this worker holds, from their claim or hand-off until their attempt's outcome is
  // recorded (or they go back to the outbox): never claimed again meanwhile. An outage longer than the
  // lease once let the worker claim a delivery whose attempt it was still recording, and send it twice.
  const mine = new Set<string>();

  /**
   * Records an attempt's outcome, trying again (with a growing pause) while the store is away: an
   * outcome not recorded would let the delivery's lease run out and the receiver get it once more, so
   * under an outage or connection exhaustion a refused record is kept and written late (recording
   * takes no lease: the attempt's number says which attempt it settles) instead of sent again.
   */
  async function recordSurely(record: AttemptRecord): Promise<void> {
    for (let pauseMs = 100;; pauseMs = Math.min(pauseMs * 2, MAX_RECORD_RETRY_MS)) {
      try {
        return await records.add(record);
      } catch (error) {
        if (stopping.signal.aborted || storeUnavailableReason(error) === null) throw error;
      }
      // Unreferenced: a stopping process is not held open by a store that does not answer.
      await new Promise((resolve) => setTimeout(resolve, pauseMs).unref());
    }
  }

  function headersFor(delivery: ClaimedDelivery, now: number): Record<string, string> {
    const headers: Record<string, string> = {
      "Content-Type": "application/json",
      "User-Agent": "Runplane-Webhook/1",
      "X-Request-Id": delivery.run_id,
    };
    if (delivery.credentials) headers.Authorization = basicAuthorization(options.secrets.open(delivery.credentials));
    if (delivery.secret !== null) {
      const timestamp = Math.floor(now / 1000);
      const secret = options.secrets.open(delivery.secret);
      headers[names.timestamp] = String(timestamp);
      headers[names.signature] = signWebhook(secret, { runId: delivery.run_id, timestamp, body: delivery.body });
    }
    return headers;
  }

  /**
   * Makes one attempt and records it. `sent(answered)` is called once the receiver answered (or the
   * attempt ended without an answer): the window's and the destination's slot is free from then, while
   * the outcome is committed (the delivery's lease holds it until then).
   */
  async function attempt(delivery: ClaimedDelivery, sent: (answered: boolean) => void): Promise<void> {
    const number = delivery.attempts + 1;
    // The store's clock: the attempt's time, the signature's timestamp and the next attempt's due time
    // are the database's, not this host's, whose clock may be off.
    const at = clock();
    const start: AttemptStart = { runId: delivery.run_id, attempt: number, at, holdUntil: at + options.timeoutMs };
    await starts.add(start);
    if (stopping.signal.aborted) return;
    if (!start.held) {
      options.logger.info(
        { run_id: delivery.run_id, attempt: number },
        "webhook attempt not sent: its lease ran out before it could start; whichever process claims it sends it",
      );
      return;
    }
    const started = performance.now();
    const outcome = await postOnce({
      url: new URL(delivery.endpoint),
      body: delivery.body,
      headers: headersFor(delivery, at),
      timeoutMs: options.timeoutMs,
      guard: options.guard,
      signal: stopping.signal,
    });
    sent("statusCode" in outcome);
    if (stopping.signal.aborted) return;
    const durationMs = Math.round((performance.now() - started) * 100) / 100;
    const verdict = judgeAttempt(outcome);
    const record: AttemptRecord = {
      runId: delivery.run_id,
      attempt: number,
      at,
      durationMs,
      outcome,
      verdict,
      nextAttemptAt: clock() + options.retryDelayMs,
      maxAttempts: delivery.attempt_limit ?? MAX_ATTEMPTS,
    };
    await recordSurely(record);
    const status = statusAfter(record);
    const label = status === "pending" ? "retry" : "refused" in outcome && outcome.refused ? "refused" : status;
    options.metrics?.webhookAttempts.inc({ outcome: label });
    // Latency: from the run's end (the delivery was enqueued with its final state) to the final outcome.
    if (status !== "pending") {
      options.metrics?.webhookDeliveryLatency.observe(
        { outcome: status },
        Math.max(0, clock() - delivery.created_at) / 1000,
      );
    }
    const detail = { run_id: delivery.run_id, attempt: number, outcome: label, ...outcome, duration_ms: durationMs };
    if (status === "failed") options.logger.warn(detail, "webhook delivery failed");
    else if (status === "delivered") options.logger.info(detail, "webhook delivered");
    else options.logger.info(detail, "webhook attempt failed; retrying");
    if (status === "pending") ticker.wakeAfter(options.retryDelayMs);
  }

  // Claimed and handed-off deliveries wait here for room in the window (and at their destination), with
  // their lease's end.
  const ready: Array<{ delivery: ClaimedDelivery; leaseEnds: number; destination: string }> = [];
  // Attempts in flight, and deliveries in `ready`, by destination.
  const busy = new Map<string, number>();
  const waiting = new Map<string, number>();
  // Endpoints of the attempts in flight, to leave a busy destination's deliveries out of the claims.
  const endpointsInFlight = new Map<string, number>();
  const saturated = (destination: string) => (busy.get(destination) ?? 0) >= perDestination;
  function count(counts: Map<string, number>, destination: string, by: number): void {
    const value = (counts.get(destination) ?? 0) + by;
    if (value) counts.set(destination, value);
    else counts.delete(destination);
  }

  function enqueue(delivery: ClaimedDelivery, leaseEnds: number): void {
    const destination = destinationOf(delivery.endpoint);
    mine.add(delivery.run_id);
    ready.push({ delivery, leaseEnds, destination });
    count(waiting, destination, 1);
  }

  function dequeue(index: number): (typeof ready)[number] {
    const [entry] = ready.splice(index, 1);
    count(waiting, entry.destination, -1);
    return entry;
  }

  function start(entry: (typeof ready)[number]): void {
    const { delivery, destination } = entry;
    inFlight++;
    count(busy, destination, 1);
    if (!answeredAt.has(destination)) answeredAt.set(destination, performance.now());
    count(endpointsInFlight, delivery.endpoint, 1);
    let released = false;
    function release(answered = false): void {
      if (released) return;
      released = true;
      inFlight--;
      count(busy, destination, -1);
      if (busy.has(destination)) answeredAt.set(destination, performance.now());
      else answeredAt.delete(destination);
      if (answered) restorePostponed(destination);
      count(endpointsInFlight, delivery.endpoint, -1);
      pump();
      if (backlog) ticker.wake();
    }
    attempt(delivery, release)
      .catch((error) =>
        options.logger.error({ run_id: delivery.run_id, err: error }, "webhook attempt could not be recorded")
      )
      .finally(() => {
        // Its outcome is recorded (or given up): from now on the delivery may be claimed again.
        mine.delete(delivery.run_id);
        release();
      });
  }

  /** Puts a postponed destination's deliveries back in line: it answered, so it is not dead. */
  function restorePostponed(destination: string): void {
    const entry = postponed.get(destination);
    if (!entry) return;
    postponed.delete(destination);
    restoreDue(options.db, { endpoints: entry.endpoints, postponedTo: entry.dueAt, now: clock() })
      .then((restored) => {
        if (restored) ticker.wake();
      })
      .catch((error) =>
        options.logger.warn({ err: error }, "postponed deliveries not put back in line; they are due after the timeout")
      );
  }

  /**
   * Starts what the window and the destinations have room for, oldest first. Past what its destination
   * may start soon (`perDestination` more), a delivery goes back to the outbox, due again a little
   * later: the window and the claims stay free for the other destinations.
   */
  function pump(): void {
    const kept = new Map<string, number>();
    const snoozed: string[] = [];
    for (let i = 0; i < ready.length && !stopping.signal.aborted;) {
      const entry = ready[i];
      // Too close to its lease's end, another process may claim it as well: leave it to the outbox.
      if (clock() + options.timeoutMs >= entry.leaseEnds) {
        mine.delete(dequeue(i).delivery.run_id);
      } else if (inFlight < maxInFlight && !saturated(entry.destination)) {
        start(dequeue(i));
      } else if (saturated(entry.destination) && (kept.get(entry.destination) ?? 0) >= perDestination) {
        const runId = dequeue(i).delivery.run_id;
        mine.delete(runId);
        snoozed.push(runId);
      } else {
        count(kept, entry.destination, 1);
        i++;
      }
    }
    if (snoozed.length) {
      snoozeDeliveries(options.db, { runIds: snoozed, owner, dueAt: clock() + SNOOZE_MS }).catch((error) =>
        options.logger.warn({ err: error }, "deliveries to a busy destination not put back; their leases will end")
      );
    }
  }

  /** Deliveries in `ready` that could start once the window has room (their destination has room). */
  function startable(): number {
    let count = 0;
    for (const entry of ready) if (!saturated(entry.destination)) count++;
    return count;
  }

  async function tick(): Promise<void> {
    const room = maxInFlight - inFlight - startable();
    if (room <= 0) {
      // Woken with a full window: look again as soon as an attempt finishes.
      backlog = true;
      return;
    }
    const now = clock();
    // A busy destination's deliveries are not claimed: they would only go back to the outbox.
    const skipEndpoints = [...endpointsInFlight.keys()].filter((endpoint) => saturated(destinationOf(endpoint)));
    // A slow destination's due deliveries would stay at the head of the due index, read past by every
    // claim: move them out of the way until its attempts in flight may have ended (once per timeout at
    // most, per destination; its first answer puts them back). A fast one that is merely full keeps its
    // place in line.
    const slow = new Map<string, string[]>();
    for (const endpoint of skipEndpoints) {
      const destination = destinationOf(endpoint);
      const silentFor = performance.now() - (answeredAt.get(destination) ?? Infinity);
      if (silentFor < SLOW_AFTER_MS || (postponed.get(destination)?.dueAt ?? -Infinity) > now) continue;
      const endpoints = slow.get(destination);
      if (endpoints) endpoints.push(endpoint);
      else slow.set(destination, [endpoint]);
    }
    if (slow.size) {
      const dueAt = now + options.timeoutMs;
      for (const [destination, endpoints] of slow) postponed.set(destination, { endpoints, dueAt });
      await postponeDue(options.db, { endpoints: [...slow.values()].flat(), now, dueAt });
    }
    const limit = Math.min(room, 32);
    const due = await claimDueDeliveries(options.db, { owner, now, leaseMs, limit, skipEndpoints, skipRuns: mine });
    // More may be due: the claim was full, or it left a busy destination's out (claim again as it frees).
    backlog = due.length === limit || skipEndpoints.length > 0;
    const claimed = await settleInterruptedAttempts(options.db, due, { maxAttempts: MAX_ATTEMPTS, now, owner });
    for (const delivery of claimed) enqueue(delivery, now + leaseMs);
    pump();
  }

  const handOff: DeliveryHandOff = {
    lease(now, endpoint) {
      const destination = destinationOf(endpoint);
      const full = ready.length >= maxReady
        || (saturated(destination) && (waiting.get(destination) ?? 0) >= perDestination);
      // `now` is the store's clock (the delivery's created_at), as the lease's end is.
      return full || stopping.signal.aborted ? null : { owner, expiresAt: now + leaseMs };
    },
    take(deliveries) {
      for (const delivery of deliveries) enqueue(delivery, delivery.created_at + leaseMs);
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
