import type { Kysely } from "kysely";

/**
 * `app_samples`: what each host saw of an app, per minute (issue 51's charts): the most replicas it ran at
 * once and how many it started. A host samples every few seconds and folds each sample into its row of
 * the minute (one upsert), so an app's replicas over time are the sum over hosts per minute; rows are
 * swept with the runs' results (`RUNPLANE_RESULT_TTL`, at least a day). `runs_by_app_end` serves
 * `getAppStats`: an app's runs by the time they ended.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("app_samples")
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("host_id", "text", (c) => c.notNull())
    .addColumn("minute", "bigint", (c) => c.notNull())
    .addColumn("replicas", "integer", (c) => c.notNull())
    .addColumn("starts", "integer", (c) => c.notNull())
    .addPrimaryKeyConstraint("app_samples_pk", ["project_id", "app_id", "minute", "host_id"])
    .execute();
  await db.schema.createIndex("app_samples_minute").on("app_samples").column("minute").execute();
  await db.schema.createIndex("runs_by_app_end").on("runs").columns(["project_id", "app_id", "completed_at"])
    .execute();
}
