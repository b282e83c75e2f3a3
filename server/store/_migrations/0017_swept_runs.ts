import type { Kysely } from "kysely";

/**
 * `runs.swept_owner`: the lease owner whose run another process's stale-lease sweep ended
 * `failure`/`interrupted` (its lease had run out: a guess that its process is gone). Its owner may still
 * be alive (cut off from the store longer than the lease): its own end, when it comes, replaces the
 * guess. Null for every other end (the owner's own, a cancel), which nothing replaces.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("runs").addColumn("swept_owner", "text").execute();
}
