import type { Kysely } from "kysely";

/**
 * `runs.lease_generation`: which holding of a run may end it. A claim and a lease rescue add one; every
 * end compares it (with the run's status) in the statement that writes the end, so of two processes that
 * both think they may end a run (an owner blocked past its lease and the process that rescued the run),
 * one writes the end and its webhook delivery and the other writes nothing. Existing runs start at 0.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("runs").addColumn("lease_generation", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
}
