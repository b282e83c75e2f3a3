import type { Kysely } from "kysely";

/**
 * `dashboard_sessions`: the dashboard's signed-in sessions, held by the server so that signing out ends
 * one everywhere (its sealed cookie, copied or not, then opens to nothing). A row lives from sign-in to
 * sign-out or its expiry; expired rows are dropped at the next sign-in (the index serves that).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("dashboard_sessions")
    .addColumn("id", "text", (c) => c.primaryKey())
    .addColumn("service_account_id", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("expires_at", "bigint", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("dashboard_sessions_expiry").on("dashboard_sessions").column("expires_at").execute();
}
