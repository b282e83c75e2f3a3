import type { Kysely } from "kysely";

/**
 * Keys shared by every process of a PostgreSQL store (token signing, the data key of sealed secrets),
 * each sealed with the master key. On SQLite the keys stay files in the data dir and the table is empty.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("keys")
    .addColumn("kid", "text", (c) => c.primaryKey())
    .addColumn("purpose", "text", (c) => c.notNull())
    .addColumn("sealed", "text", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addColumn("retired_at", "bigint")
    .execute();
  await db.schema.createIndex("keys_by_purpose").on("keys").columns(["purpose", "created_at"]).execute();
}
