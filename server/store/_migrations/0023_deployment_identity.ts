import type { Kysely } from "kysely";

/**
 * Deployment identity: a deployment's `message` (what its deployer said it is), the git commit its files
 * come from (`git_commit`) and whether its folder held changes that commit does not (`git_dirty`, 0 or
 * 1); and each run's `deployment_id`, the deployment whose replica took the call (null for an app of the
 * apps folder and for runs recorded before this migration).
 */
export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable("deployments").addColumn("message", "text").execute();
  await db.schema.alterTable("deployments").addColumn("git_commit", "text").execute();
  await db.schema.alterTable("deployments").addColumn("git_dirty", "integer", (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema.alterTable("runs").addColumn("deployment_id", "text").execute();
}
