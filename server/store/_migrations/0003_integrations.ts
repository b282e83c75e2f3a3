import type { Kysely } from "kysely";

/** Each project's repository provider: local (no row) or GitHub, with its token sealed. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("project_integrations")
    .addColumn("project_id", "text", (c) => c.primaryKey().references("projects.id"))
    .addColumn("provider", "text", (c) => c.notNull())
    .addColumn("github_api_url", "text")
    .addColumn("github_token_sealed", "text")
    .addColumn("updated_at", "bigint", (c) => c.notNull())
    .execute();
}
