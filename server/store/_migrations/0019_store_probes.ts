import type { Kysely } from "kysely";

/**
 * `store_probes`: one row per process, rewritten by the probe that tells whether the store can write
 * (`/readyz`, and the end of an outage). A real write: on a full disk a read still works.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("store_probes")
    .addColumn("owner", "text", (column) => column.primaryKey())
    .addColumn("written_at", "bigint", (column) => column.notNull())
    .execute();
}
