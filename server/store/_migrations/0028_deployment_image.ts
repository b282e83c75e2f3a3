import type { Kysely } from "kysely";

/**
 * The OCI image a deployment runs in (`[build] base_image`): the reference its `runplane.toml` wrote
 * (`image_reference`) and the manifest digest the build pulled (`image_digest`), recorded once the image
 * is pulled, before the build's steps run. Both null for a deployment that runs on the host's system (and
 * for deployments built before this migration).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("deployments").addColumn("image_reference", "text").execute();
  await db.schema.alterTable("deployments").addColumn("image_digest", "text").execute();
}
