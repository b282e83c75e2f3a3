import type { Kysely } from "kysely";

/**
 * Which deployment each server process serves, per app: written by the process when it starts serving
 * one, renewed by its heartbeat (`seen_at`), removed when it stops cleanly. A row whose heartbeat is old
 * belongs to a process that stopped without saying so: readers ignore it and heartbeats delete it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("served_deployments")
    .addColumn("process_id", "text", (c) => c.notNull())
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("deployment_id", "text", (c) => c.notNull())
    .addColumn("host", "text", (c) => c.notNull())
    .addColumn("since", "bigint", (c) => c.notNull())
    .addColumn("seen_at", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("served_deployments_pk", ["process_id", "project_id", "app_id"])
    .execute();
  await db.schema
    .createIndex("served_deployments_app")
    .on("served_deployments")
    .columns(["project_id", "app_id"])
    .execute();
}
