import { type Kysely, sql } from "kysely";

/**
 * Indexes for two upkeep statements that read their table whole on every tick (found by the query-plan
 * test): forgetting idempotency keys past their window, and dropping the sealed secrets of settled
 * deliveries past the result TTL (a partial index: only deliveries still holding a secret are in it).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex("idempotency_keys_by_creation").on("idempotency_keys").column("created_at").execute();
  await sql`create index "webhook_deliveries_sealed" on "webhook_deliveries" ("created_at")
    where "secret" is not null or "credentials" is not null`.execute(db);
}
