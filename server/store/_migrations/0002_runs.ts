import type { Kysely } from "kysely";

/** Run records, the webhook outbox with its attempts, and idempotency keys. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("runs")
    .addColumn("run_id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("function_name", "text", (c) => c.notNull())
    .addColumn("mode", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("started_at", "bigint")
    .addColumn("completed_at", "bigint")
    .addColumn("queue_time_ms", "double precision")
    .addColumn("run_time_ms", "double precision")
    .addColumn("input_json", "text")
    .addColumn("result_json", "text")
    .addColumn("result_expired", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("error_type", "text")
    .addColumn("error_message", "text")
    .addColumn("error_traceback", "text")
    .addColumn("webhook_endpoint", "text")
    .addColumn("webhook_secret", "text")
    .addColumn("lease_owner", "text")
    .addColumn("lease_expires_at", "bigint")
    .addColumn("cancel_requested", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema.createIndex("runs_by_app").on("runs").columns(["project_id", "app_id", "run_id"]).execute();
  await db.schema.createIndex("runs_by_status").on("runs").columns(["status", "project_id", "app_id", "run_id"])
    .execute();
  await db.schema.createIndex("runs_by_completion").on("runs").columns(["result_expired", "completed_at"]).execute();

  await db.schema
    .createTable("webhook_deliveries")
    .addColumn("run_id", "text", (c) => c.primaryKey())
    .addColumn("endpoint", "text", (c) => c.notNull())
    .addColumn("body", "text", (c) => c.notNull())
    .addColumn("secret", "text")
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("attempts", "integer", (c) => c.notNull().defaultTo(0))
    .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
    .addColumn("lease_owner", "text")
    .addColumn("lease_expires_at", "bigint")
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("webhook_deliveries_due").on("webhook_deliveries").columns(["status", "next_attempt_at"])
    .execute();

  await db.schema
    .createTable("webhook_attempts")
    .addColumn("run_id", "text", (c) => c.notNull())
    .addColumn("attempt", "integer", (c) => c.notNull())
    .addColumn("at", "bigint", (c) => c.notNull())
    .addColumn("status_code", "integer")
    .addColumn("error", "text")
    .addColumn("duration_ms", "double precision", (c) => c.notNull())
    .addPrimaryKeyConstraint("webhook_attempts_pk", ["run_id", "attempt"])
    .execute();

  await db.schema
    .createTable("idempotency_keys")
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("key", "text", (c) => c.notNull())
    .addColumn("fingerprint", "text", (c) => c.notNull())
    .addColumn("run_id", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("idempotency_keys_pk", ["project_id", "key"])
    .execute();
}
