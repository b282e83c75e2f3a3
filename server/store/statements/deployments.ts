/**
 * The SQL of deployments, each statement once per engine where they differ (side by side, see
 * `DialectStatement`). The deployments' records (`server/deployments/_records.ts`) run these.
 */
import type { Selectable } from "kysely";
import { columnList, rawStatement } from "../mod.ts";
import type { DeploymentTable } from "../schema.ts";

/** Every column of `deployments`, listed so that a column a newer migration adds is not returned. */
const DEPLOYMENT_COLUMNS = {
  deployment_id: true,
  project_id: true,
  app_id: true,
  status: true,
  bundle_digest: true,
  size_bytes: true,
  source: true,
  repository_json: true,
  base_image_digest: true,
  base_image_status: true,
  config_toml: true,
  image_reference: true,
  image_digest: true,
  message: true,
  git_commit: true,
  git_dirty: true,
  created_at: true,
  started_at: true,
  finished_at: true,
  error: true,
  lease_owner: true,
  lease_expires_at: true,
} satisfies Record<keyof DeploymentTable, true>;

/**
 * Claims the oldest queued build of an app that has none building, in one autocommit statement.
 * PostgreSQL locks the candidate `FOR UPDATE SKIP LOCKED`; two processes claiming builds of the same
 * app at once are kept apart by the unique index on building rows (the loser's statement fails and
 * claims nothing). Parameters: now, owner, lease end.
 */
export const claimBuild = rawStatement<Selectable<DeploymentTable>>({
  sqlite: `update "deployments" set "status" = 'building', "started_at" = ?, "lease_owner" = ?, "lease_expires_at" = ?`
    + ` where "deployment_id" = (select "d"."deployment_id" from "deployments" as "d" where "d"."status" = 'queued'`
    + ` and not exists (select 1 from "deployments" as "b" where "b"."project_id" = "d"."project_id"`
    + ` and "b"."app_id" = "d"."app_id" and "b"."status" = 'building') order by "d"."deployment_id" limit 1)`
    + ` and "status" = 'queued' returning ${columnList(DEPLOYMENT_COLUMNS)}`,
  postgres:
    `with "next" as materialized (select "d"."deployment_id" from "deployments" as "d" where "d"."status" = 'queued'`
    + ` and not exists (select 1 from "deployments" as "b" where "b"."project_id" = "d"."project_id"`
    + ` and "b"."app_id" = "d"."app_id" and "b"."status" = 'building')`
    + ` order by "d"."deployment_id" limit 1 for update skip locked)`
    + ` update "deployments" as "u" set "status" = 'building', "started_at" = $1, "lease_owner" = $2, "lease_expires_at" = $3`
    + ` from "next" where "u"."deployment_id" = "next"."deployment_id" and "u"."status" = 'queued' returning ${
      columnList(DEPLOYMENT_COLUMNS, "u")
    }`,
});
