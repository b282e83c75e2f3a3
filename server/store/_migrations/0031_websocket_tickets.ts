import type { Kysely } from "kysely";

/**
 * `websocket_tickets`: the WebSocket tickets of a cluster (issue 47), so a ticket minted through one host
 * opens a connection through any other. A ticket is stored only as its SHA-256 (a dump of the table opens
 * nothing), with its app and expiry; it is consumed with one conditional DELETE … RETURNING (single use
 * under races); expired rows are swept by the runs' upkeep (the index serves that).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("websocket_tickets")
    .addColumn("digest", "text", (c) => c.primaryKey())
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("expires_at", "bigint", (c) => c.notNull())
    .execute();
  await db.schema.createIndex("websocket_tickets_expiry").on("websocket_tickets").column("expires_at").execute();
  await db.schema.createIndex("websocket_tickets_project").on("websocket_tickets").column("project_id").execute();
}
