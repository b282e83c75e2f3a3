import type { Kysely } from "kysely";

/** Projects, service accounts and base-image digests. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("projects")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .execute();
  await db.schema
    .createTable("service_accounts")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull().references("projects.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("scopes", "text", (c) => c.notNull())
    .addColumn("token_id", "text", (c) => c.notNull().unique())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("expires_at", "bigint", (c) => c.notNull())
    .addColumn("revoked_at", "bigint")
    .execute();
  await db.schema
    .createIndex("service_accounts_project")
    .on("service_accounts")
    .columns(["project_id", "created_at"])
    .execute();
  await db.schema
    .createTable("base_image_digests")
    .addColumn("project_id", "text", (c) => c.notNull().references("projects.id"))
    .addColumn("digest", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("seen_count", "integer", (c) => c.notNull().defaultTo(1))
    .addPrimaryKeyConstraint("base_image_digests_pk", ["project_id", "digest"])
    .execute();
}
