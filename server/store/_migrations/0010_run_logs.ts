import type { Kysely } from "kysely";

/**
 * `run_logs`: each line a run's function wrote, numbered from 1 per run. Past the per-run limit the
 * oldest lines are deleted, so a run whose first line is not 1 had its head cut (`truncated`).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("run_logs")
    .addColumn("run_id", "text", (c) => c.notNull())
    .addColumn("seq", "integer", (c) => c.notNull())
    .addColumn("at", "bigint", (c) => c.notNull())
    .addColumn("stream", "text", (c) => c.notNull())
    .addColumn("line", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("run_logs_pk", ["run_id", "seq"])
    .execute();
  await db.schema.createIndex("run_logs_at").on("run_logs").column("at").execute();
}
