/**
 * The project secrets' store queries, written with Kysely's portable builders (the same statements on
 * SQLite and PostgreSQL). A change raises the project's version first, in its transaction: on
 * PostgreSQL that locks the project's version row, so changes of one project take turns and the limits
 * checked after it hold; every change takes the locks in the same order (version, then secret).
 */
import type { Kysely, Transaction } from "kysely";
import type { Database } from "../store/mod.ts";

/** A secret as listed: never its value. */
export interface SecretRow {
  name: string;
  created_at: number;
  updated_at: number;
}

/** A secret's sealed value. */
export interface SealedRow {
  name: string;
  value_sealed: string;
}

/** The project's secrets, by name, without their values. */
export async function selectSecrets(db: Kysely<Database>, projectId: string): Promise<SecretRow[]> {
  return await db.selectFrom("project_secrets").select(["name", "created_at", "updated_at"])
    .where("project_id", "=", projectId).orderBy("name").execute();
}

/** The project's sealed values, by name. */
export async function selectSealed(db: Kysely<Database>, projectId: string): Promise<SealedRow[]> {
  return await db.selectFrom("project_secrets").select(["name", "value_sealed"])
    .where("project_id", "=", projectId).orderBy("name").execute();
}

/** The project's version: 0 when its secrets never changed. */
export async function selectVersion(db: Kysely<Database>, projectId: string): Promise<number> {
  const row = await db.selectFrom("project_secret_versions").select("version").where("project_id", "=", projectId)
    .executeTakeFirst();
  return row ? Number(row.version) : 0;
}

/** Every project whose secrets ever changed. */
export async function selectVersionedProjects(db: Kysely<Database>): Promise<string[]> {
  const rows = await db.selectFrom("project_secret_versions").select("project_id").orderBy("project_id").execute();
  return rows.map((row) => row.project_id);
}

/** Whether the project has a secret called `name`. */
export async function secretExists(db: Kysely<Database>, ref: { projectId: string; name: string }): Promise<boolean> {
  const row = await db.selectFrom("project_secrets").select("name").where("project_id", "=", ref.projectId)
    .where("name", "=", ref.name).executeTakeFirst();
  return row !== undefined;
}

/**
 * Makes the project if it is new and raises its version (1 for the first change): the first write of
 * every change, so that concurrent changes of one project take turns.
 */
export async function raiseVersion(tx: Transaction<Database>, projectId: string, now: number): Promise<void> {
  await tx.insertInto("projects").values({ id: projectId, created_at: now })
    .onConflict((oc) => oc.column("id").doNothing()).execute();
  await tx.insertInto("project_secret_versions").values({ project_id: projectId, version: 1, updated_at: now })
    .onConflict((oc) =>
      oc.column("project_id").doUpdateSet((eb) => ({
        version: eb("project_secret_versions.version", "+", 1),
        updated_at: now,
      }))
    ).execute();
}

/** The name and size of each of the project's secrets (inside the change's transaction). */
export async function selectSizes(
  tx: Transaction<Database>,
  projectId: string,
): Promise<Array<{ name: string; value_bytes: number }>> {
  const rows = await tx.selectFrom("project_secrets").select(["name", "value_bytes"])
    .where("project_id", "=", projectId).execute();
  return rows.map((row) => ({ name: row.name, value_bytes: Number(row.value_bytes) }));
}

/** Stores a secret, made or replaced; resolves with when it was made. */
export async function upsertSecret(
  tx: Transaction<Database>,
  row: { projectId: string; name: string; sealed: string; bytes: number; now: number },
): Promise<number> {
  const stored = await tx.insertInto("project_secrets").values({
    project_id: row.projectId,
    name: row.name,
    value_sealed: row.sealed,
    value_bytes: row.bytes,
    created_at: row.now,
    updated_at: row.now,
  }).onConflict((oc) =>
    oc.columns(["project_id", "name"]).doUpdateSet({
      value_sealed: row.sealed,
      value_bytes: row.bytes,
      updated_at: row.now,
    })
  ).returning("created_at").executeTakeFirstOrThrow();
  return Number(stored.created_at);
}

/** Removes a secret; resolves with whether there was one. */
export async function deleteSecret(
  tx: Transaction<Database>,
  ref: { projectId: string; name: string },
): Promise<boolean> {
  const deleted = await tx.deleteFrom("project_secrets").where("project_id", "=", ref.projectId)
    .where("name", "=", ref.name).returning("name").execute();
  return deleted.length > 0;
}
