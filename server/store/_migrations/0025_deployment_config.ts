import type { Kysely } from "kysely";

/**
 * A deployment's `runplane.toml` as its build read it (`config_toml`), recorded when the build plans its
 * steps. A host of a cluster reads an app's settings from it (its replica limits, concurrency, hardware)
 * and builds the deployment only when it is to run one of its replicas; null for deployments built before
 * this migration (every host builds those, as before).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("deployments").addColumn("config_toml", "text").execute();
}
