import type { Kysely } from "kysely";

/**
 * `runs.method`: the HTTP method a run was called with. `POST` for a function call (every run recorded
 * before this migration); `GET`, `PUT`, `PATCH`, `DELETE`, `HEAD` or `OPTIONS` for a call of a custom
 * runtime's route (issue 47).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable("runs")
    .addColumn("method", "text", (c) => c.notNull().defaultTo("POST"))
    .execute();
}
