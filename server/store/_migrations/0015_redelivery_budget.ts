import type { Kysely } from "kysely";

/**
 * `webhook_deliveries.redelivery_full_at`: when the run's budget of redeliveries is full again (a token
 * bucket kept as one time, GCRA's theoretical arrival time); null: full. Kept in the delivery's row, so
 * every process sharing the store counts the same redeliveries.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("webhook_deliveries").addColumn("redelivery_full_at", "bigint").execute();
}
