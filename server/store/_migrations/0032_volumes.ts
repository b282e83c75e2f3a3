import type { Kysely } from "kysely";

/**
 * `volumes`: a project's volumes (issue 48), each a folder of files with a hard size limit under
 * `RUNPLANE_VOLUMES_DIR`. The row is the volume's record (its size, when it was made); its files are on
 * disk, never in the store.
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable("volumes")
    .addColumn("project_id", "text", (c) => c.notNull())
    .addColumn("name", "text", (c) => c.notNull())
    .addColumn("size_bytes", "bigint", (c) => c.notNull())
    .addColumn("created_at", "bigint", (c) => c.notNull())
    .addPrimaryKeyConstraint("volumes_pk", ["project_id", "name"])
    .execute();
}
