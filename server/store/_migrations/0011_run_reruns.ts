import type { Kysely } from "kysely";

/** `runs.rerun_of`: the run a call ran again (`rerunOf`), so each run lists the runs that repeated it. */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("runs").addColumn("rerun_of", "text").execute();
  await db.schema.createIndex("runs_rerun_of").on("runs").column("rerun_of").execute();
}
