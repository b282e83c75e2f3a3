import { type Kysely, PostgresAdapter, sql } from "kysely";

/**
 * Deployments: bundles kept once by digest (the bytes of each app version, so every process on every
 * host materialises the same files), apps made by deploying, their deployments with the build's state
 * and claim, and each build's log lines.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  // The one type that differs: raw bytes are `bytea` on PostgreSQL, `blob` on SQLite.
  const bytes = db.getExecutor().adapter instanceof PostgresAdapter ? sql`bytea` : sql`blob`;
  await db.schema
    .createTable("bundles")
    .addColumn("digest", "text", (c) => c.primaryKey())
    .addColumn("size_bytes", "bigint", (c) => c.notNull())
    .addColumn("data", bytes, (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await db.schema
    .createTable("apps")
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("active_deployment_id", "text")
    .addColumn("deleted_at", "bigint")
    .addPrimaryKeyConstraint("apps_pk", ["project_id", "app_id"])
    .execute();
  await db.schema
    .createTable("deployments")
    .addColumn("deployment_id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("status", "text", (c) => c.notNull())
    .addColumn("bundle_digest", "text", (c) => c.notNull())
    .addColumn("size_bytes", "bigint", (c) => c.notNull())
    .addColumn("source", "text", (c) => c.notNull())
    .addColumn("repository_json", "text")
    .addColumn("base_image_digest", "text")
    .addColumn("base_image_status", "text")
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("started_at", "bigint")
    .addColumn("finished_at", "bigint")
    .addColumn("error", "text")
    .addColumn("lease_owner", "text")
    .addColumn("lease_expires_at", "bigint")
    .execute();
  await db.schema.createIndex("deployments_by_app").on("deployments").columns(["project_id", "app_id", "deployment_id"])
    .execute();
  await db.schema.createIndex("deployments_by_status").on("deployments").columns(["status", "deployment_id"]).execute();
  // Builds of one app run one at a time, whichever process claims them: a second claim of a build of
  // the same app breaks this index and claims nothing.
  await db.schema
    .createIndex("deployments_one_build_per_app")
    .on("deployments")
    .columns(["project_id", "app_id"])
    .unique()
    .where(sql.ref("status"), "=", "building")
    .execute();
  await db.schema
    .createTable("deployment_logs")
    .addColumn("deployment_id", "text", (c) => c.notNull())
    .addColumn("seq", "integer", (c) => c.notNull())
    .addColumn("at", "bigint", (c) => c.notNull())
    .addColumn("stream", "text", (c) => c.notNull())
    .addColumn("line", "text", (c) => c.notNull())
    .addPrimaryKeyConstraint("deployment_logs_pk", ["deployment_id", "seq"])
    .execute();
}
