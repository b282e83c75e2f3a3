import type { Kysely } from "kysely";

/**
 * `runs.websocket_json`: a WebSocket run's counters and close (issue 47), as JSON — messages and bytes
 * each way, the close code and reason, who closed — written with the run's end. NULL for every other run
 * (and every run recorded before this migration).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("runs").addColumn("websocket_json", "text").execute();
}
