/**
 * One attempt of a delivery (see delivery_worker.ts): counted in the store before it is sent, posted
 * (signed when the delivery carries a secret), and its outcome recorded, surely, with the retry table
 * applied, its metrics and its log line.
 */
import type { Kysely } from "kysely";
import type { AbortSignalLike } from "../abort/mod.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import { createGroupCommit, type Database, type GroupCommit, storeUnavailableReason } from "../store/mod.ts";
import type { GuardOptions } from "./destination_guard.ts";
import {
  type AttemptRecord,
  type AttemptStart,
  type ClaimedDelivery,
  recordAttempts,
  recordAttemptStarts,
  statusAfter,
} from "./outbox.ts";
import { basicAuthorization } from "./endpoint_credentials.ts";
import { postOnce } from "./_post.ts";
import { judgeAttempt, MAX_ATTEMPTS } from "./retry_policy.ts";
import { signWebhook, type WebhookHeaderNames } from "./signer.ts";

/** The longest pause between tries to record an attempt's outcome while the store is away. */
const MAX_RECORD_RETRY_MS = 5_000;

/** What `DeliveryAttempts` needs. */
export interface DeliveryAttemptsOptions {
  db: Kysely<Database>;
  secrets: SecretBox;
  logger: Logger;
  /** The signature's and timestamp's header names. */
  names: WebhookHeaderNames;
  /** Per-attempt timeout. */
  timeoutMs: number;
  /** Pause between attempts. */
  retryDelayMs: number;
  guard: GuardOptions;
  metrics?: Pick<Metrics, "webhookAttempts" | "webhookDeliveryLatency">;
  /** The worker's lease owner id. */
  owner: string;
  /** The store's clock. */
  clock: () => number;
  /** Aborted when the worker stops: attempts in flight are abandoned with no outcome recorded. */
  signal: AbortSignalLike;
  /** Looks at the outbox again after `ms` (a retry is due then). */
  wakeAfter(ms: number): void;
}

/** The attempts of one delivery worker, with the group commits that count and record them. */
export class DeliveryAttempts {
  readonly #options: DeliveryAttemptsOptions;
  // Attempts that end within 10 ms of each other are recorded in one transaction. Until it commits, the
  // delivery's lease holds it: a crash in between means one more attempt, never a lost one.
  readonly #records: GroupCommit<AttemptRecord>;
  // An attempt is counted in the store before it is sent: one killed mid-attempt is not lost from the
  // record while the receiver got it. Starts of the same event-loop turn share one commit. Counted only
  // while this worker holds the delivery long enough for the attempt (else it is not sent).
  readonly #starts: GroupCommit<AttemptStart>;

  constructor(options: DeliveryAttemptsOptions) {
    this.#options = options;
    const { db, owner } = options;
    this.#records = createGroupCommit<AttemptRecord>((batch) => recordAttempts(db, batch, { owner }), {
      delayMs: 10,
    });
    this.#starts = createGroupCommit<AttemptStart>((batch) => recordAttemptStarts(db, batch, { owner }));
  }

  /**
   * Makes one attempt and records it. `sent(answered)` is called once the receiver answered (or the
   * attempt ended without an answer): the window's and the destination's slot is free from then, while
   * the outcome is committed (the delivery's lease holds it until then).
   */
  async attempt(delivery: ClaimedDelivery, sent: (answered: boolean) => void): Promise<void> {
    const options = this.#options;
    const { clock, signal } = options;
    const number = delivery.attempts + 1;
    // The store's clock: the attempt's time, the signature's timestamp and the next attempt's due time
    // are the database's, not this host's, whose clock may be off.
    const at = clock();
    const start: AttemptStart = { runId: delivery.run_id, attempt: number, at, holdUntil: at + options.timeoutMs };
    await this.#starts.add(start);
    if (signal.aborted) return;
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
      headers: this.#headersFor(delivery, at),
      timeoutMs: options.timeoutMs,
      guard: options.guard,
      signal,
    });
    sent("statusCode" in outcome);
    if (signal.aborted) return;
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
    await this.#recordSurely(record);
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
    if (status === "pending") options.wakeAfter(options.retryDelayMs);
  }

  /**
   * Records an attempt's outcome, trying again (with a growing pause) while the store is away: an
   * outcome not recorded would let the delivery's lease run out and the receiver get it once more, so
   * under an outage or connection exhaustion a refused record is kept and written late (recording
   * takes no lease: the attempt's number says which attempt it settles) instead of sent again.
   */
  async #recordSurely(record: AttemptRecord): Promise<void> {
    for (let pauseMs = 100;; pauseMs = Math.min(pauseMs * 2, MAX_RECORD_RETRY_MS)) {
      try {
        return await this.#records.add(record);
      } catch (error) {
        if (this.#options.signal.aborted || storeUnavailableReason(error) === null) throw error;
      }
      // Unreferenced: a stopping process is not held open by a store that does not answer.
      await new Promise((resolve) => setTimeout(resolve, pauseMs).unref());
    }
  }

  #headersFor(delivery: ClaimedDelivery, now: number): Record<string, string> {
    const { secrets, names } = this.#options;
    const headers: Record<string, string> = {
      "Content-Type": "application/json",
      "User-Agent": "Runplane-Webhook/1",
      "X-Request-Id": delivery.run_id,
    };
    if (delivery.credentials) headers.Authorization = basicAuthorization(secrets.open(delivery.credentials));
    if (delivery.secret !== null) {
      const timestamp = Math.floor(now / 1000);
      const secret = secrets.open(delivery.secret);
      headers[names.timestamp] = String(timestamp);
      headers[names.signature] = signWebhook(secret, { runId: delivery.run_id, timestamp, body: delivery.body });
    }
    return headers;
  }
}
