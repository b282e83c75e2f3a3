/**
 * The webhook outbox in the store: one delivery per run with the exact body and the sealed secret, its
 * attempts, and the leases that keep two processes from attempting the same delivery at once.
 */
import type { Kysely, Transaction } from "kysely";
import type { components } from "../../generated/api.d.ts";
import type { Database } from "../store/mod.ts";
import type { WebhookDeliveryTable } from "../store/schema.ts";
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
}

/** The JSON body of a run's delivery, serialised once: these bytes are signed and sent on every attempt. */
export function webhookBody(body: Omit<WebhookBody, "timestamp">, now: number = Date.now()): string {
  const full: WebhookBody = { ...body, timestamp: new Date(now).toISOString() };
  return JSON.stringify(full);
}

/** Adds a delivery, due now; a second one for the same run is ignored. Call inside the run's final write. */
export async function enqueueDelivery(db: Db, delivery: NewDelivery, now: number = Date.now()): Promise<void> {
  await db
    .insertInto("webhook_deliveries")
    .values({
      run_id: delivery.runId,
      endpoint: delivery.endpoint,
      body: delivery.body,
      secret: delivery.sealedSecret,
      status: "pending",
      next_attempt_at: now,
      lease_owner: null,
      lease_expires_at: null,
      created_at: now,
    })
    .onConflict((oc) => oc.column("run_id").doNothing())
    .execute();
}

/** A delivery this process holds the lease of. */
export type ClaimedDelivery = Pick<WebhookDeliveryTable, "run_id" | "endpoint" | "body" | "secret"> & { attempts: number; created_at: number };

/**
 * Claims up to `limit` due deliveries for `owner` until `now + leaseMs`. Each claim is one conditional
 * UPDATE, so a delivery is held by one process at a time; an expired lease (a dead process) frees it.
 */
export async function claimDueDeliveries(
  db: Kysely<Database>,
  options: { owner: string; now: number; leaseMs: number; limit: number },
): Promise<ClaimedDelivery[]> {
  const { owner, now, leaseMs, limit } = options;
  const due = await db
    .selectFrom("webhook_deliveries")
    .select(["run_id", "endpoint", "body", "secret", "attempts", "created_at"])
    .where("status", "=", "pending")
    .where("next_attempt_at", "<=", now)
    .where((eb) => eb.or([eb("lease_expires_at", "is", null), eb("lease_expires_at", "<", now)]))
    .orderBy("next_attempt_at")
    .limit(limit)
    .execute();
  const claimed: ClaimedDelivery[] = [];
  if (due.length === 0) return claimed;
  // One transaction for the whole batch: one commit instead of one per delivery.
  await db.transaction().execute(async (trx) => {
    for (const row of due) {
      const result = await trx
      .updateTable("webhook_deliveries")
      .set({ lease_owner: owner, lease_expires_at: now + leaseMs })
      .where("run_id", "=", row.run_id)
      .where("status", "=", "pending")
      .where("attempts", "=", row.attempts)
      .where((eb) => eb.or([eb("lease_expires_at", "is", null), eb("lease_expires_at", "<", now)]))
      .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 1) claimed.push({ ...row, attempts: Number(row.attempts), created_at: Number(row.created_at) });
    }
  });
  return claimed;
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

/**
 * Records an attempt and moves the delivery on: delivered, failed, or due again. A settled delivery
 * drops its secret. Returns the delivery's status after the attempt.
 */
export async function recordAttempt(db: Kysely<Database>, record: AttemptRecord): Promise<"pending" | "delivered" | "failed"> {
  const status = record.verdict === "delivered"
    ? "delivered"
    : record.verdict === "permanent" || record.attempt >= record.maxAttempts
    ? "failed"
    : "pending";
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto("webhook_attempts")
      .values({
        run_id: record.runId,
        attempt: record.attempt,
        at: record.at,
        status_code: "statusCode" in record.outcome ? record.outcome.statusCode : null,
        error: "error" in record.outcome ? record.outcome.error : null,
        duration_ms: record.durationMs,
      })
      .onConflict((oc) => oc.columns(["run_id", "attempt"]).doNothing())
      .execute();
    await trx
      .updateTable("webhook_deliveries")
      .set({
        status,
        attempts: record.attempt,
        next_attempt_at: record.nextAttemptAt,
        lease_owner: null,
        lease_expires_at: null,
        ...(status === "pending" ? {} : { secret: null }),
      })
      .where("run_id", "=", record.runId)
      .execute();
  });
  return status;
}

/** The webhook state of each of `runIds` that has a delivery. */
export async function webhookViews(db: Kysely<Database>, runIds: string[]): Promise<Map<string, WebhookView>> {
  const views = new Map<string, WebhookView>();
  if (runIds.length === 0) return views;
  const deliveries = await db.selectFrom("webhook_deliveries").select(["run_id", "status"]).where("run_id", "in", runIds).execute();
  for (const d of deliveries) views.set(d.run_id, { status: d.status as WebhookView["status"], attempts: [] });
  const attempts = await db
    .selectFrom("webhook_attempts")
    .selectAll()
    .where("run_id", "in", runIds)
    .orderBy("run_id")
    .orderBy("attempt")
    .execute();
  for (const a of attempts) {
    views.get(a.run_id)?.attempts.push({
      attempt: Number(a.attempt),
      at: new Date(Number(a.at)).toISOString(),
      status_code: a.status_code === null ? null : Number(a.status_code),
      error: a.error,
      duration_ms: Number(a.duration_ms),
    });
  }
  return views;
}
