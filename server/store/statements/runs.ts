/**
 * The SQL of the run queue and its leases, each statement once per engine where they differ (side by
 * side, see `DialectStatement`); `run_rows.ts` holds the whole-row writes. The runs' rules live in
 * `server/runs/`, which runs these.
 */
import type { Selectable } from "kysely";
import { columnList, rawStatement } from "../mod.ts";
import { sqlStatus } from "../run_states.ts";
import type { RunTable } from "../schema.ts";

const QUEUED = sqlStatus("queued");
const RUNNING = sqlStatus("running");

/** Every column of `runs`, listed so that a column a newer migration adds is not returned. */
const RUN_COLUMNS = {
  run_id: true,
  project_id: true,
  app_id: true,
  function_name: true,
  method: true,
  mode: true,
  status: true,
  created_at: true,
  started_at: true,
  completed_at: true,
  queue_time_ms: true,
  run_time_ms: true,
  input_json: true,
  result_json: true,
  result_expired: true,
  result_truncated: true,
  error_type: true,
  error_message: true,
  error_traceback: true,
  webhook_endpoint: true,
  webhook_secret: true,
  webhook_credentials: true,
  lease_owner: true,
  lease_expires_at: true,
  cancel_requested: true,
  rerun_of: true,
  deployment_id: true,
  swept_owner: true,
  lease_generation: true,
  websocket_json: true,
} satisfies Record<keyof RunTable, true>;

export const firstQueuedAppOfLaterProject = rawStatement<{ project_id: string; app_id: string }>(
  `select "project_id", "app_id" from "runs" where "status" = ${QUEUED} and "project_id" > ? order by "project_id", "app_id" limit 1`,
);

export const nextQueuedAppOfProject = rawStatement<{ app_id: string }>(
  `select "app_id" from "runs" where "status" = ${QUEUED} and "project_id" = ? and "app_id" > ? order by "app_id" limit 1`,
);

// `order by … limit 1`, not `min()`: PostgreSQL turns `min()` into an index walk only when its row
// estimates say so, and on a young table (no statistics yet) it read every queued run (8 ms at 30,000).
export const oldestQueuedRun = rawStatement<{ oldest: string }>(
  `select "run_id" as "oldest" from "runs" where "status" = ${QUEUED} and "project_id" = ? and "app_id" = ?`
    + ` order by "run_id" limit 1`,
);

// A claim is one autocommit statement that re-checks `status = 'queued'` on each row it updates, and
// takes at most `limit` rows. PostgreSQL: the candidates are locked `FOR UPDATE SKIP LOCKED`, so
// concurrent claimers take disjoint runs (a plain `in (select … limit n)` lets two claimers' subqueries
// pick the same rows). SQLite: one writer at a time runs the whole statement. Each claim starts a new
// lease generation: only this holding's end is written (a run ends once). Parameters: now, now, owner,
// lease end, project, app, limit.
export const claimQueued = rawStatement<Selectable<RunTable>>({
  sqlite: `update "runs" set "status" = ${RUNNING}, "started_at" = ?, "queue_time_ms" = max(0, ? - "created_at"),`
    + ` "lease_owner" = ?, "lease_expires_at" = ?, "lease_generation" = "lease_generation" + 1`
    + ` where "run_id" in (select "run_id" from "runs" where "status" = ${QUEUED} and "project_id" = ? and "app_id" = ?`
    + ` order by "run_id" limit ?) and "status" = ${QUEUED} returning ${columnList(RUN_COLUMNS)}`,
  postgres: `with "next" as materialized (select "run_id" from "runs"`
    + ` where "status" = ${QUEUED} and "project_id" = $5 and "app_id" = $6 order by "run_id" limit $7 for update skip locked)`
    + ` update "runs" as "r" set "status" = ${RUNNING}, "started_at" = $1, "queue_time_ms" = greatest(0, $2 - "r"."created_at"),`
    + ` "lease_owner" = $3, "lease_expires_at" = $4, "lease_generation" = "r"."lease_generation" + 1`
    + ` from "next" where "r"."run_id" = "next"."run_id" and "r"."status" = ${QUEUED}`
    + ` returning ${columnList(RUN_COLUMNS, "r")}`,
});

export const renewLeasesOf = rawStatement<{ run_id: string; cancel_requested: number }>(
  `update "runs" set "lease_expires_at" = ? where "lease_owner" = ? and "status" = ${RUNNING}`
    + ` returning "run_id", "cancel_requested"`,
);
