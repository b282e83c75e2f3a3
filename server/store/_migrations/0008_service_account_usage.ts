import type { Kysely } from "kysely";

/** `service_accounts.last_used_at`: when the account's token last authenticated (written at most once a minute). */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("service_accounts").addColumn("last_used_at", "bigint").execute();
}
