/**
 * The SQL that puts a claimed async run back on the queue (issue 44): its executor was turned away for
 * a reason of the platform's that passes (no replica may run it here now, the store refused) before its
 * function started. The runs' rules live in `server/runs/_queued_run.ts`, which runs this.
 */
import { rawStatement } from "../mod.ts";
import { sqlStatus } from "../run_states.ts";

// A guarded transition, as an end is: only while the run is still `running` under this owner's lease in
// the generation it was claimed in, and no cancel was asked for it meanwhile (such a run is ended
// `cancelled` instead); it closes that generation. Its place in the queue is its run id, which it keeps;
// its start and queue time will be those of the claim that runs it. One text: both engines take it
// (SQLite has `returning` since 3.35). Parameters: run id, owner, generation.
export const requeueLeasedRun = rawStatement<{ run_id: string }>(
  `update "runs" set "status" = ${
    sqlStatus("queued")
  }, "started_at" = null, "queue_time_ms" = null, "lease_owner" = null,`
    + ` "lease_expires_at" = null, "lease_generation" = "lease_generation" + 1`
    + ` where "run_id" = ? and "status" = ${sqlStatus("running")} and "lease_owner" = ? and "lease_generation" = ?`
    + ` and "cancel_requested" = 0 returning "run_id"`,
);
