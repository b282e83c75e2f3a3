import type { Kysely } from "kysely";

/**
 * `runs_by_project`: a project's runs newest first across its apps (`listProjectRuns`, the dashboard's
 * all-apps view), read page by page from the index rather than sorted from all of the project's runs.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.createIndex("runs_by_project").on("runs").columns(["project_id", "run_id"]).execute();
}
