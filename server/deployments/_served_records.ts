/**
 * The store's record of which deployment each process serves (`served_deployments`): each process
 * writes its own rows, renews them at its heartbeat and deletes them when it stops; every process may
 * delete rows whose heartbeat is old (their process stopped without saying so).
 */
import type { Kysely, Selectable } from "kysely";
import type { Database } from "../store/mod.ts";
import type { ServedDeploymentTable } from "../store/schema.ts";

/** One app's deployment as one process serves it. */
export type ServedRow = Selectable<ServedDeploymentTable>;

/**
 * Writes `rows` (all of one process's, with this heartbeat's `seen_at`) and deletes that process's rows
 * of apps it no longer serves, in one transaction.
 */
export async function replaceServed(
  db: Kysely<Database>,
  processId: string,
  rows: ServedRow[],
): Promise<void> {
  await db.transaction().execute(async (tx) => {
    const kept = new Set(rows.map((row) => `${row.project_id}/${row.app_id}`));
    const stored = await tx
      .selectFrom("served_deployments")
      .select(["project_id", "app_id"])
      .where("process_id", "=", processId)
      .execute();
    for (const row of stored) {
      if (kept.has(`${row.project_id}/${row.app_id}`)) continue;
      await tx
        .deleteFrom("served_deployments")
        .where("process_id", "=", processId)
        .where("project_id", "=", row.project_id)
        .where("app_id", "=", row.app_id)
        .execute();
    }
    if (rows.length === 0) return;
    await tx
      .insertInto("served_deployments")
      .values(rows)
      .onConflict((oc) =>
        oc.columns(["process_id", "project_id", "app_id"]).doUpdateSet((eb) => ({
          deployment_id: eb.ref("excluded.deployment_id"),
          host: eb.ref("excluded.host"),
          since: eb.ref("excluded.since"),
          seen_at: eb.ref("excluded.seen_at"),
        }))
      )
      .execute();
  });
}

/** Deletes every row of one process (it stops serving). */
export async function deleteServed(db: Kysely<Database>, processId: string): Promise<void> {
  await db.deleteFrom("served_deployments").where("process_id", "=", processId).execute();
}

/** Deletes the rows of every process whose heartbeat is older than `seenBefore`; returns how many. */
export async function deleteStaleServed(db: Kysely<Database>, seenBefore: number): Promise<number> {
  const result = await db.deleteFrom("served_deployments").where("seen_at", "<", seenBefore).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/** The rows of a project's apps (one app's when `appId` is given) renewed at `seenSince` or later. */
export function selectServed(
  db: Kysely<Database>,
  where: { projectId: string; appId?: string; seenSince: number },
): Promise<ServedRow[]> {
  let query = db
    .selectFrom("served_deployments")
    .selectAll()
    .where("project_id", "=", where.projectId)
    .where("seen_at", ">=", where.seenSince);
  if (where.appId !== undefined) query = query.where("app_id", "=", where.appId);
  return query.orderBy("app_id").orderBy("since").orderBy("process_id").execute();
}
