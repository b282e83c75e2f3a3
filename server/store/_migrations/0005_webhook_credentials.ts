import type { Kysely } from "kysely";

/**
 * The user information of a webhook endpoint (`https://user:pass@host/`), sealed like the secret: the
 * endpoint is stored and shown without it, and the delivery sends it as Basic authentication.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("runs").addColumn("webhook_credentials", "text").execute();
  await db.schema.alterTable("webhook_deliveries").addColumn("credentials", "text").execute();
}
