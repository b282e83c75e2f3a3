/**
 * The SQL of the webhook outbox, each statement once per engine where they differ (side by side, see
 * `DialectStatement`): deliveries, their leases and their attempts. The rules of the outbox (what an
 * attempt's outcome does to its delivery) live in `server/webhooks/outbox.ts`, which runs these.
 */
import { rawStatement } from "../mod.ts";
import type { WebhookDeliveryTable } from "../schema.ts";

/** A claimed delivery's row as the claim returns it. */
export type ClaimedDeliveryRow = Pick<
  WebhookDeliveryTable,
  "run_id" | "endpoint" | "body" | "secret" | "credentials" | "attempts" | "created_at" | "attempt_limit"
>;

export const insertDelivery = rawStatement(
  `insert into "webhook_deliveries" ("run_id", "endpoint", "body", "secret", "credentials", "status", "next_attempt_at", "lease_owner", "lease_expires_at", "created_at")`
    + ` values (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?) on conflict ("run_id") do nothing`,
);

// A run ends once, so it has one delivery: a second one for the same run is never stored over the first
// (that one may be in flight). Returns the row it added, none on a conflict (see `putEndDelivery`).
export const insertEndDelivery = rawStatement<{ lease_owner: string | null }>(
  `insert into "webhook_deliveries" ("run_id", "endpoint", "body", "secret", "credentials", "status", "next_attempt_at", "lease_owner", "lease_expires_at", "created_at")`
    + ` values (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?) on conflict ("run_id") do nothing returning "lease_owner"`,
);

// A claim is one autocommit statement, and the lease condition is checked again on the row it
// updates. PostgreSQL: the candidates are locked `FOR UPDATE SKIP LOCKED`, so concurrent claimers take
// disjoint rows (a plain `in (select … limit n)` lets two claimers' subqueries pick the same rows, and
// the one that waited re-checks only the `in`: a delivery sent twice). SQLite: one writer at a time
// runs the whole statement, so today's form holds. Endpoints in a JSON array are skipped (their
// destination is busy), and so are the runs in another (the claimer's own attempts in flight: a process
// never claims again a delivery it is still sending or recording, whatever its lease says). Parameters:
// owner, lease end, now, now, skipped endpoints, skipped runs, limit, now.
export const claimDue = rawStatement<ClaimedDeliveryRow>({
  sqlite: `update "webhook_deliveries" set "lease_owner" = ?, "lease_expires_at" = ?`
    + ` where "run_id" in (select "run_id" from "webhook_deliveries"`
    + ` where "status" = 'pending' and "next_attempt_at" <= ? and ("lease_expires_at" is null or "lease_expires_at" < ?)`
    + ` and "endpoint" not in (select "value" from json_each(?))`
    + ` and "run_id" not in (select "value" from json_each(?))`
    + ` order by "next_attempt_at" limit ?)`
    + ` and "status" = 'pending' and ("lease_expires_at" is null or "lease_expires_at" < ?)`
    + ` returning "run_id", "endpoint", "body", "secret", "credentials", "attempts", "created_at", "attempt_limit"`,
  postgres: `with "due" as materialized (select "run_id" from "webhook_deliveries"`
    + ` where "status" = 'pending' and "next_attempt_at" <= $3 and ("lease_expires_at" is null or "lease_expires_at" < $4)`
    + ` and not ("endpoint" = any (array(select jsonb_array_elements_text($5::jsonb))))`
    + ` and not ("run_id" = any (array(select jsonb_array_elements_text($6::jsonb))))`
    + ` order by "next_attempt_at" limit $7 for update skip locked)`
    + ` update "webhook_deliveries" as "d" set "lease_owner" = $1, "lease_expires_at" = $2 from "due"`
    + ` where "d"."run_id" = "due"."run_id" and "d"."status" = 'pending'`
    + ` and ("d"."lease_expires_at" is null or "d"."lease_expires_at" < $8)`
    + ` returning "d"."run_id", "d"."endpoint", "d"."body", "d"."secret", "d"."credentials", "d"."attempts", "d"."created_at", "d"."attempt_limit"`,
});

// An attempt's row is written when it starts (no outcome yet) and completed when it ends.
export const insertAttempt = rawStatement(
  `insert into "webhook_attempts" ("run_id", "attempt", "at", "status_code", "error", "duration_ms") values (?, ?, ?, ?, ?, ?)`
    + ` on conflict ("run_id", "attempt") do update set "status_code" = excluded."status_code", "error" = excluded."error", "duration_ms" = excluded."duration_ms"`,
);

export const startAttempt = rawStatement(
  `insert into "webhook_attempts" ("run_id", "attempt", "at", "status_code", "error", "duration_ms") values (?, ?, ?, null, null, 0)`
    + ` on conflict ("run_id", "attempt") do nothing`,
);

const COUNT_ATTEMPT = `update "webhook_deliveries" set "attempts" = ? where "run_id" = ? and "attempts" < ?`;
/**
 * Counts an attempt about to be sent: on any delivery, or only while it is pending and `lease_owner`
 * holds it until at least the given time (the last two parameters: the attempt must end within the
 * lease, so it is sent by the one claim that holds it). Returns the row when it counted.
 */
export const countAttempt = {
  any: rawStatement<{ run_id: string }>(COUNT_ATTEMPT + ` returning "run_id"`),
  held: rawStatement<{ run_id: string }>(
    COUNT_ATTEMPT + ` and "status" = 'pending' and "lease_owner" = ? and "lease_expires_at" >= ? returning "run_id"`,
  ),
};

export const markOutcomeUnknown = rawStatement(
  `update "webhook_attempts" set "error" = ? where "run_id" = ? and "attempt" = ? and "status_code" is null and "error" is null`,
);

const MOVE_ON_PENDING =
  `update "webhook_deliveries" set "status" = 'pending', "attempts" = ?, "next_attempt_at" = ?, "lease_owner" = null, "lease_expires_at" = null where "run_id" = ?`;
// A settled delivery keeps its sealed secret and credentials for a redelivery, until the run's result
// expires (`forgetDeliverySecrets`).
const SETTLE =
  `update "webhook_deliveries" set "status" = ?, "attempts" = ?, "next_attempt_at" = ?, "lease_owner" = null, "lease_expires_at" = null where "run_id" = ?`;
// A worker moves on only the deliveries it still holds: one whose lease ran out while its attempt was in
// flight, and that another process claimed since, is that claim's to move on (the attempt's own row is
// still completed with its outcome: the record lists every attempt sent).
const HELD = ` and "lease_owner" = ?`;
/** Moves a delivery on to its next attempt: on any delivery, or only while `lease_owner` (the last parameter) holds it. */
export const moveOn = { any: rawStatement(MOVE_ON_PENDING), held: rawStatement(MOVE_ON_PENDING + HELD) };
/** Settles a delivery (delivered or failed): on any delivery, or only while `lease_owner` holds it. */
export const settle = { any: rawStatement(SETTLE), held: rawStatement(SETTLE + HELD) };
