import type { Kysely } from "kysely";

/**
 * `service_accounts.parent_id`: the account whose token minted this one over the API (null for one made
 * where the server runs). A token is refused once any account up its chain is revoked; the index serves
 * revocation's walk down to what an account minted.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("service_accounts").addColumn("parent_id", "text").execute();
  await db.schema.createIndex("service_accounts_parent").on("service_accounts").column("parent_id").execute();
}
