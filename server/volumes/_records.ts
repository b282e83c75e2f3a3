/**
 * The volumes' store queries, with Kysely's portable builders (the same statements on SQLite and
 * PostgreSQL). Creating a volume counts the project's volumes in its transaction after taking the
 * project's row (inserted, or touched), so two creations of one project take turns and the limit holds.
 */
import type { Kysely, Transaction } from "kysely";
import type { Database } from "../store/mod.ts";

/** A volume's record. */
export interface VolumeRow {
  name: string;
  size_bytes: number;
  created_at: number;
}

function row(r: { name: string; size_bytes: number | string; created_at: number | string }): VolumeRow {
  return { name: r.name, size_bytes: Number(r.size_bytes), created_at: Number(r.created_at) };
}

/** The project's volumes, by name. */
export async function selectVolumes(db: Kysely<Database>, projectId: string): Promise<VolumeRow[]> {
  const rows = await db.selectFrom("volumes").select(["name", "size_bytes", "created_at"])
    .where("project_id", "=", projectId).orderBy("name").execute();
  return rows.map(row);
}

/** One volume, or undefined. */
export async function selectVolume(
  db: Kysely<Database> | Transaction<Database>,
  ref: { projectId: string; name: string },
): Promise<VolumeRow | undefined> {
  const found = await db.selectFrom("volumes").select(["name", "size_bytes", "created_at"])
    .where("project_id", "=", ref.projectId).where("name", "=", ref.name).executeTakeFirst();
  return found ? row(found) : undefined;
}

/** Takes the project's row (made when new): creations of one project's volumes take turns behind it. */
export async function lockProject(tx: Transaction<Database>, projectId: string, now: number): Promise<void> {
  await tx.insertInto("projects").values({ id: projectId, created_at: now })
    .onConflict((oc) => oc.column("id").doUpdateSet({ id: projectId })).execute();
}

/** How many volumes the project has. */
export async function countVolumes(tx: Transaction<Database>, projectId: string): Promise<number> {
  const counted = await tx.selectFrom("volumes").select((eb) => eb.fn.countAll<number>().as("n"))
    .where("project_id", "=", projectId).executeTakeFirstOrThrow();
  return Number(counted.n);
}

/** Records a new volume. */
export async function insertVolume(
  tx: Transaction<Database>,
  volume: { projectId: string; name: string; sizeBytes: number; now: number },
): Promise<void> {
  await tx.insertInto("volumes").values({
    project_id: volume.projectId,
    name: volume.name,
    size_bytes: volume.sizeBytes,
    created_at: volume.now,
  }).execute();
}

/** Removes a volume's record; resolves with whether there was one. */
export async function deleteVolumeRow(
  db: Kysely<Database>,
  ref: { projectId: string; name: string },
): Promise<boolean> {
  const deleted = await db.deleteFrom("volumes").where("project_id", "=", ref.projectId)
    .where("name", "=", ref.name).returning("name").execute();
  return deleted.length > 0;
}
