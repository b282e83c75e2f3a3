import type { Kysely } from "kysely";

/** `runs.result_truncated`: 1 when the result was larger than the stored-result limit. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable("runs")
    .addColumn("result_truncated", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
}
