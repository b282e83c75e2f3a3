import type { Kysely } from "kysely";

/**
 * `webhook_deliveries.attempt_limit`: the attempts a delivery may make in all when it is not the retry
 * table's (a redelivery is one attempt more than it made). Null: the retry table's.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("webhook_deliveries").addColumn("attempt_limit", "integer").execute();
}
