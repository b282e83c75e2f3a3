import type { Kysely } from "kysely";

/**
 * Project secrets: each value sealed with the secret box (never the plaintext), its size kept beside it
 * so the project's total can be checked without opening them, and a version per project that every
 * change raises in the same transaction (the fingerprint a replica's environment is compared with).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("project_secrets")
    .addColumn("project_id", "text", (c) => c.notNull().references("projects.id"))
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("value_sealed", "text", (c) => c.notNull())
    .addColumn("value_bytes", "integer", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("updated_at", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("project_secrets_pk", ["project_id", "name"])
    .execute();
  await db.schema
    .createTable("project_secret_versions")
    .addColumn("project_id", "text", (c) => c.primaryKey().references("projects.id"))
    .addColumn("version", "bigint", (c) => c.notNull())
    .addColumn("updated_at", "bigint", (c) => c.notNull())
    .execute();
}
