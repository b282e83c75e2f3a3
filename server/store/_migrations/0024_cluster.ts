import type { Kysely } from "kysely";

/**
 * The cluster: every server process registers as a host (`hosts`: its advertised base URL, capacity and
 * heartbeat), and holds seats (`replica_seats`): a seat is the right to run one replica of an app, seats
 * 0 to `max_replicas - 1` exist per app, and the primary key makes "two processes never run more than
 * `max_replicas` together" a unique constraint. A row whose `seen_at` is old belongs to a host that
 * stopped heartbeating: readers ignore it, a claimer may take its seat over, heartbeats delete it.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("hosts")
    .addColumn("host_id", "text", (c) => c.primaryKey())
    .addColumn("url", "text", (c) => c.notNull())
    .addColumn("cpu", "double precision", (c) => c.notNull())
    .addColumn("memory_bytes", "bigint", (c) => c.notNull())
    .addColumn("gpus", "integer", (c) => c.notNull())
    .addColumn("started_at", "bigint", (c) => c.notNull())
    .addColumn("seen_at", "bigint", (c) => c.notNull())
    .execute();
  await db.schema
    .createTable("replica_seats")
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("app_id", "text", (c) => c.notNull())
    .addColumn("seat", "integer", (c) => c.notNull())
    .addColumn("host_id", "text", (c) => c.notNull())
    .addColumn("state", "text", (c) => c.notNull())
    .addColumn("slots", "integer", (c) => c.notNull())
    .addColumn("busy", "integer", (c) => c.notNull())
    .addColumn("claimed_at", "bigint", (c) => c.notNull())
    .addColumn("seen_at", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("replica_seats_pk", ["project_id", "app_id", "seat"])
    .execute();
  await db.schema.createIndex("replica_seats_host").on("replica_seats").column("host_id").execute();
}
