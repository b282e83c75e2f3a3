import type { Kysely } from "kysely";

/**
 * `runs_rerun_of` holds only the runs that ran another again: the index of every run cost each new
 * run's insert an entry (SQLite ~0.5–1 µs of a sync call's record) for a column nearly always null.
 * `selectReruns` (`rerun_of = ?`) still reads through it: both engines know that `=` implies not null.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex("runs_rerun_of").execute();
  await db.schema.createIndex("runs_rerun_of").on("runs").column("rerun_of").where("rerun_of", "is not", null)
    .execute();
}
