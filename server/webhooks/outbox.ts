/**
 * The webhook outbox in the store: one delivery per run with the exact body and the sealed secret, its
 * attempts, and the leases that keep two processes from attempting the same delivery at once.
 */
import type { Kysely, Transaction } from "kysely";
import type { components } from "../../generated/api.d.ts";
import type { Database } from "../store/mod.ts";
import {
  claimDue,
  countAttempt,
  insertAttempt,
  insertDelivery,
  insertEndDelivery,
  markOutcomeUnknown,
  moveOn,
  settle,
  startAttempt,
} from "../store/statements/deliveries.ts";
import type { WebhookDeliveryTable } from "../store/schema.ts";
import { type RedeliveryLimit, takeRedelivery } from "./redelivery_limit.ts";
import type { AttemptOutcome, AttemptVerdict } from "./retry_policy.ts";

type Db = Kysely<Database> | Transaction<Database>;

/** The contract's `RunWebhook` without its endpoint: status and attempts. */
export type WebhookView = Pick<components["schemas"]["RunWebhook"], "status" | "attempts">;

/** The contract's webhook body. */
export type WebhookBody = components["schemas"]["WebhookDelivery"];

/** A delivery to add to the outbox. */
export interface NewDelivery {
  runId: string;
  endpoint: string;
  /** The exact bytes to send (see `webhookBody`). */
  body: string;
  /** The secret sealed with the secret box, or null for unsigned deliveries. */
  sealedSecret: string | null;
  /** The endpoint's `user:password` sealed with the secret box (sent as Basic authentication), or null. */
  sealedCredentials?: string | null;
}

/**
 * The JSON body of a run's delivery, serialised once: these bytes are signed and sent on every attempt.
 * The result comes as the JSON text already stored with the run (`resultJson`, null for none), so it is
 * neither parsed nor serialised again.
 */
export function webhookBody(
  body: Omit<WebhookBody, "timestamp" | "result">,
  options: { resultJson: string | null; now?: number },
): string {
  const rest: Omit<WebhookBody, "result"> = { ...body, timestamp: new Date(options.now ?? Date.now()).toISOString() };
  // `rest` always has members, so its text is `{"run_id":…}`: the result goes in as the first member.
  return `{"result":${options.resultJson ?? "null"},${JSON.stringify(rest).slice(1)}`;
}

/** A lease a delivery is inserted with: it is handed to that owner's worker instead of being claimed. */
export interface DeliveryLease {
  owner: string;
  expiresAt: number;
}

/**
 * Adds a delivery, due now; a second one for the same run is ignored. Call inside the run's final write.
 * With `lease`, the delivery is held by that owner from the start. Resolves with whether it was added.
 */
export async function enqueueDelivery(
  db: Db,
  delivery: NewDelivery,
  options: { now?: number; lease?: DeliveryLease } = {},
): Promise<boolean> {
  const result = await insertDelivery(db, insertParameters(delivery, options.now ?? Date.now(), options.lease));
  return Number(result.numAffectedRows ?? 0n) > 0;
}

/** The parameters of a delivery's insert, due (and made) at `now`, held by `lease` when given. */
function insertParameters(delivery: NewDelivery, now: number, lease: DeliveryLease | undefined): unknown[] {
  return [
    delivery.runId,
    delivery.endpoint,
    delivery.body,
    delivery.sealedSecret,
    delivery.sealedCredentials ?? null,
    now,
    lease?.owner ?? null,
    lease?.expiresAt ?? null,
    now,
  ];
}

/**
 * Stores the delivery of a run's end that its writer has just written; call inside that write's
 * transaction, and only when the guarded write did end the run (a run ends once, and so has one
 * delivery). Resolves with `leased` when the row was added with `lease` (hand it to that worker),
 * `queued` when it was added unleased (it waits in the outbox: wake the worker), or `kept` when the run
 * had a delivery already, which is left as it is (nothing to hand off or send).
 */
export async function putEndDelivery(
  db: Db,
  delivery: NewDelivery,
  options: { now: number; lease?: DeliveryLease },
): Promise<"leased" | "queued" | "kept"> {
  const { rows } = await insertEndDelivery(db, insertParameters(delivery, options.now, options.lease));
  if (rows.length === 0) return "kept";
  return rows[0].lease_owner ? "leased" : "queued";
}

/** A delivery this process holds the lease of. */
export type ClaimedDelivery = Pick<WebhookDeliveryTable, "run_id" | "endpoint" | "body" | "secret"> & {
  /** The endpoint's sealed `user:password`, when it had one. */
  credentials?: string | null;
  attempts: number;
  created_at: number;
  /** The attempts it may make in all; undefined or null: the retry table's. */
  attempt_limit?: number | null;
};

/** Options of `claimDueDeliveries`. */
export interface ClaimOptions {
  owner: string;
  /** The store's clock. */
  now: number;
  leaseMs: number;
  limit: number;
  /** Endpoints whose deliveries are left out (their destination is busy). */
  skipEndpoints?: Iterable<string>;
  /** Runs whose deliveries are left out: the claimer's own, still in flight (never claimed twice). */
  skipRuns?: Iterable<string>;
}

/**
 * Claims up to `limit` of the longest-due deliveries for `owner` until `now + leaseMs`, except those to
 * `skipEndpoints` and those of `skipRuns`: each due delivery goes to one claimer, however many processes
 * claim at once.
 */
export async function claimDueDeliveries(db: Kysely<Database>, options: ClaimOptions): Promise<ClaimedDelivery[]> {
  const { owner, now, leaseMs, limit } = options;
  const skipped = JSON.stringify([...(options.skipEndpoints ?? [])]);
  const skippedRuns = JSON.stringify([...(options.skipRuns ?? [])]);
  const { rows } = await claimDue(db, [owner, now + leaseMs, now, now, skipped, skippedRuns, limit, now]);
  return rows.map((row) => ({ ...row, attempts: Number(row.attempts), created_at: Number(row.created_at) }));
}

/** Frees the deliveries `owner` holds (its process is gone): they are due again at once. */
export async function releaseDeliveryLeases(db: Db, owner: string): Promise<number> {
  const result = await db
    .updateTable("webhook_deliveries")
    .set({ lease_owner: null, lease_expires_at: null })
    .where("lease_owner", "=", owner)
    .where("status", "=", "pending")
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** One finished attempt and what follows it. */
export interface AttemptRecord {
  runId: string;
  attempt: number;
  at: number;
  durationMs: number;
  outcome: AttemptOutcome;
  /** `retry` with no attempts left is recorded as `failed`. */
  verdict: AttemptVerdict;
  /** When the next attempt is due (for `retry`). */
  nextAttemptAt: number;
  maxAttempts: number;
}

/** The delivery's status after `record`. */
export function statusAfter(record: AttemptRecord): "pending" | "delivered" | "failed" {
  if (record.verdict === "delivered") return "delivered";
  return record.verdict === "permanent" || record.attempt >= record.maxAttempts ? "failed" : "pending";
}

/** The error an attempt is recorded with when its process stopped before it ended. */
export const OUTCOME_UNKNOWN = "no outcome: the server stopped during this attempt (the receiver may have got it)";

/** An attempt about to be sent. */
export interface AttemptStart {
  runId: string;
  attempt: number;
  at: number;
  /** With an owner: the time until which its lease must still hold the delivery (the attempt's end). */
  holdUntil?: number;
  /** Set by `recordAttemptStarts`: whether it was recorded (false: not held, do not send it). */
  held?: boolean;
}

/**
 * Records attempts as started, before they are sent (one transaction for all): a process that dies
 * during an attempt leaves it counted, so the record never lists fewer attempts than the receiver saw.
 * With `owner`, an attempt is recorded (`held`) only while that owner still holds its pending delivery
 * until `holdUntil`: one whose lease ran out before it could start (the store was slow or away) may be
 * another claim's by now, and is not to be sent.
 */
export async function recordAttemptStarts(
  db: Kysely<Database>,
  starts: readonly AttemptStart[],
  options: { owner?: string } = {},
): Promise<void> {
  const { owner } = options;
  await db.transaction().execute(async (trx) => {
    for (const start of starts) {
      const counted = owner === undefined
        ? await countAttempt.any(trx, [start.attempt, start.runId, start.attempt])
        : await countAttempt.held(trx, [start.attempt, start.runId, start.attempt, owner, start.holdUntil ?? 0]);
      start.held = owner === undefined || counted.rows.length === 1;
      // An attempt not held is not sent: it is not listed either.
      if (start.held) await startAttempt(trx, [start.runId, start.attempt, start.at]);
    }
  });
}

/**
 * Marks the last attempt of deliveries claimed again after their process stopped mid-attempt as of
 * unknown outcome; a delivery with no attempt left then ends `failed`. Returns those that may go on.
 */
export async function settleInterruptedAttempts(
  db: Kysely<Database>,
  claimed: readonly ClaimedDelivery[],
  options: { maxAttempts: number; now: number; owner?: string },
): Promise<ClaimedDelivery[]> {
  const resumed = claimed.filter((d) => d.attempts > 0);
  if (resumed.length === 0) return [...claimed];
  const exhausted = new Set<string>();
  await db.transaction().execute(async (trx) => {
    for (const delivery of resumed) {
      await markOutcomeUnknown(trx, [OUTCOME_UNKNOWN, delivery.run_id, delivery.attempts]);
      if (delivery.attempts >= (delivery.attempt_limit ?? options.maxAttempts)) {
        await whileHeld(settle, trx, ["failed", delivery.attempts, options.now, delivery.run_id], options.owner);
        exhausted.add(delivery.run_id);
      }
    }
  });
  return claimed.filter((d) => !exhausted.has(d.run_id));
}

/** Runs `statement` on the delivery, only while `owner` (when given) holds it. */
function whileHeld(
  statement: typeof settle,
  db: Db,
  parameters: unknown[],
  owner: string | undefined,
): Promise<unknown> {
  return owner === undefined ? statement.any(db, parameters) : statement.held(db, [...parameters, owner]);
}

/**
 * Records attempts (one transaction for all of them) and moves each delivery on: delivered, failed
 * (`statusAfter`), or due again at `nextAttemptAt` — with `owner`, only the deliveries it still holds.
 */
export async function recordAttempts(
  db: Kysely<Database>,
  records: readonly AttemptRecord[],
  options: { owner?: string } = {},
): Promise<void> {
  await db.transaction().execute(async (trx) => {
    for (const record of records) {
      const { outcome } = record;
      await insertAttempt(trx, [
        record.runId,
        record.attempt,
        record.at,
        "statusCode" in outcome ? outcome.statusCode : null,
        "error" in outcome ? outcome.error : null,
        record.durationMs,
      ]);
      const status = statusAfter(record);
      if (status === "pending") {
        await whileHeld(moveOn, trx, [record.attempt, record.nextAttemptAt, record.runId], options.owner);
      } else await whileHeld(settle, trx, [status, record.attempt, record.nextAttemptAt, record.runId], options.owner);
    }
  });
}

/** The webhook state of each of `runIds` that has a delivery. */
export async function webhookViews(db: Kysely<Database>, runIds: string[]): Promise<Map<string, WebhookView>> {
  const views = new Map<string, WebhookView>();
  if (runIds.length === 0) return views;
  const deliveries = await db.selectFrom("webhook_deliveries").select(["run_id", "status"]).where(
    "run_id",
    "in",
    runIds,
  ).execute();
  for (const d of deliveries) views.set(d.run_id, { status: d.status as WebhookView["status"], attempts: [] });
  const attempts = await db
    .selectFrom("webhook_attempts")
    .selectAll()
    .where("run_id", "in", runIds)
    .orderBy("run_id")
    .orderBy("attempt")
    .execute();
  for (const a of attempts) {
    const open = a.status_code === null && a.error === null;
    views.get(a.run_id)?.attempts.push({
      attempt: Number(a.attempt),
      at: new Date(Number(a.at)).toISOString(),
      status_code: a.status_code === null ? null : Number(a.status_code),
      error: open ? "in flight: no outcome recorded yet" : a.error,
      duration_ms: Number(a.duration_ms),
    });
  }
  return views;
}

/**
 * Drops the sealed secrets and credentials of settled deliveries made at or before `before` (the runs'
 * results expire then, and a redelivery is no longer offered). Returns how many were dropped.
 */
export async function forgetDeliverySecrets(db: Kysely<Database>, options: { before: number }): Promise<number> {
  const result = await db.updateTable("webhook_deliveries")
    .set({ secret: null, credentials: null })
    .where("status", "<>", "pending")
    .where("created_at", "<=", options.before)
    .where((eb) => eb.or([eb("secret", "is not", null), eb("credentials", "is not", null)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/** Why a delivery cannot be made again (now). */
export type RedeliveryRefusal = "no-webhook" | "in-progress" | "expired" | "rate-limited";

/**
 * Queues one more delivery of a settled webhook (its attempts go on from the last; it may make one
 * more), due at once; signed and authorised as the first was. Refuses (`no-webhook`, `in-progress`,
 * `expired`: made at or before `expiredBefore`, its secret is gone; `rate-limited`: past the run's
 * `REDELIVERY_LIMIT`, with `retryAfterMs`) without changing anything. The limit's bucket is in the
 * delivery's row and changes only with the update that queues the redelivery (compare and set), so
 * processes sharing the store share the limit.
 */
export async function redeliver(
  db: Kysely<Database>,
  input: { runId: string; now: number; expiredBefore: number; limit?: RedeliveryLimit },
): Promise<
  | { ok: true }
  | { ok: false; reason: Exclude<RedeliveryRefusal, "rate-limited"> }
  | { ok: false; reason: "rate-limited"; retryAfterMs: number }
> {
  return await db.transaction().execute(async (trx) => {
    const delivery = await trx.selectFrom("webhook_deliveries")
      .select(["status", "attempts", "created_at", "redelivery_full_at"])
      .where("run_id", "=", input.runId).executeTakeFirst();
    if (!delivery) return { ok: false, reason: "no-webhook" };
    if (delivery.status === "pending") return { ok: false, reason: "in-progress" };
    if (Number(delivery.created_at) <= input.expiredBefore) return { ok: false, reason: "expired" };
    const fullAt = delivery.redelivery_full_at === null ? null : Number(delivery.redelivery_full_at);
    const taken = takeRedelivery(fullAt, { now: input.now, limit: input.limit });
    if (!taken.ok) return { ok: false, reason: "rate-limited", retryAfterMs: taken.retryAfterMs };
    const updated = await trx.updateTable("webhook_deliveries")
      .set({
        status: "pending",
        next_attempt_at: input.now,
        lease_owner: null,
        lease_expires_at: null,
        attempt_limit: Number(delivery.attempts) + 1,
        redelivery_full_at: taken.fullAt,
      })
      .where("run_id", "=", input.runId)
      .where("status", "<>", "pending")
      // Compare and set: a redelivery queued and settled meanwhile by another process is not undone.
      .where((eb) => fullAt === null ? eb("redelivery_full_at", "is", null) : eb("redelivery_full_at", "=", fullAt))
      .executeTakeFirst();
    return Number(updated.numUpdatedRows) === 1 ? { ok: true } : { ok: false, reason: "in-progress" };
  });
}

/** Deletes the deliveries of `runIds` and their attempts (their run records are being deleted). */
export async function deleteDeliveriesOf(db: Kysely<Database>, runIds: readonly string[]): Promise<void> {
  if (runIds.length === 0) return;
  await db.deleteFrom("webhook_attempts").where("run_id", "in", runIds).execute();
  await db.deleteFrom("webhook_deliveries").where("run_id", "in", runIds).execute();
}

/**
 * Puts deliveries `owner` holds back in the outbox unattempted, due again at `dueAt` (their destination
 * is busy): no attempt is counted.
 */
export async function snoozeDeliveries(
  db: Kysely<Database>,
  options: { runIds: readonly string[]; owner: string; dueAt: number },
): Promise<void> {
  if (options.runIds.length === 0) return;
  await db.updateTable("webhook_deliveries")
    .set({ lease_owner: null, lease_expires_at: null, next_attempt_at: options.dueAt })
    .where("run_id", "in", options.runIds)
    .where("lease_owner", "=", options.owner)
    .where("status", "=", "pending")
    .execute();
}

/**
 * Makes the deliveries to `endpoints` that `postponeDue` moved to `postponedTo` due again at `now` (their
 * destination answered). Reads the one instant of the due index they were moved to.
 */
export async function restoreDue(
  db: Kysely<Database>,
  options: { endpoints: readonly string[]; postponedTo: number; now: number },
): Promise<number> {
  if (options.endpoints.length === 0) return 0;
  const result = await db.updateTable("webhook_deliveries")
    .set({ next_attempt_at: options.now })
    .where("status", "=", "pending")
    .where("next_attempt_at", "=", options.postponedTo)
    .where("endpoint", "in", options.endpoints)
    .where((eb) => eb.or([eb("lease_expires_at", "is", null), eb("lease_expires_at", "<", options.now)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/**
 * Moves the due, unleased deliveries to `endpoints` (a busy destination's) to `dueAt`: they leave the
 * head of the due index, so claims stop reading past them. Reads the due range through its index.
 */
export async function postponeDue(
  db: Kysely<Database>,
  options: { endpoints: readonly string[]; now: number; dueAt: number },
): Promise<number> {
  if (options.endpoints.length === 0) return 0;
  const result = await db.updateTable("webhook_deliveries")
    .set({ next_attempt_at: options.dueAt })
    .where("status", "=", "pending")
    .where("next_attempt_at", "<=", options.now)
    .where("endpoint", "in", options.endpoints)
    .where((eb) => eb.or([eb("lease_expires_at", "is", null), eb("lease_expires_at", "<", options.now)]))
    .executeTakeFirst();
  return Number(result.numUpdatedRows);
}
