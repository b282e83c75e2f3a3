/**
 * The store's record of the cluster's hosts (`hosts`): each process writes its own row, renews it at
 * its heartbeat and deletes it when it stops; every process may delete rows whose heartbeat is old
 * (their process stopped without saying so).
 */
import type { Kysely, Selectable } from "kysely";
import type { Database } from "../store/mod.ts";
import type { HostTable } from "../store/schema.ts";

/** One host as the store records it. */
export type HostRow = Selectable<HostTable>;

/** Writes `row` (a new host, or this heartbeat's renewal of it; `started_at` stays the first one's). */
export async function upsertHost(db: Kysely<Database>, row: HostRow): Promise<void> {
  await db
    .insertInto("hosts")
    .values(row)
    .onConflict((oc) =>
      oc.column("host_id").doUpdateSet((eb) => ({
        url: eb.ref("excluded.url"),
        cpu: eb.ref("excluded.cpu"),
        memory_bytes: eb.ref("excluded.memory_bytes"),
        gpus: eb.ref("excluded.gpus"),
        seen_at: eb.ref("excluded.seen_at"),
      }))
    )
    .execute();
}

/** Deletes one host's row (it stops). */
export async function deleteHost(db: Kysely<Database>, hostId: string): Promise<void> {
  await db.deleteFrom("hosts").where("host_id", "=", hostId).execute();
}

/** The hosts renewed at `seenSince` or later, by id. */
export function selectLiveHosts(db: Kysely<Database>, where: { seenSince: number }): Promise<HostRow[]> {
  return db.selectFrom("hosts").selectAll().where("seen_at", ">=", where.seenSince).orderBy("host_id").execute();
}

/** Deletes the hosts whose heartbeat is older than `seenBefore`; returns how many. */
export async function deleteStaleHosts(db: Kysely<Database>, where: { seenBefore: number }): Promise<number> {
  const result = await db.deleteFrom("hosts").where("seen_at", "<", where.seenBefore).executeTakeFirst();
  return Number(result.numDeletedRows);
}
