/**
 * A run ends in one place. `runEnd` makes a run's end from its outcome: its final columns, its webhook
 * delivery (the exact body, signed with the run's sealed secret and authorised with its sealed
 * credentials, whatever the outcome: success, failure, cancelled, interrupted) and the event that tells
 * it (metrics, the `run finished` line, the live pages). Every path stores such an end with one of three
 * strategies and tells its event once, when the end is its to tell:
 *
 * - `endLiveRun`: a sync or stream call, through the write-behind (`_write_behind.ts`: batched; a final
 *   state with a webhook is committed at once);
 * - `endLeasedRun`: an async run, through the leased batch (`_leased_finishes.ts`);
 * - `endStoredRun`: a run ended where it is stored rather than where it runs: a cancel of a queued run,
 *   upkeep's recovery of a dead process's runs and its stale-lease rescue, the drain timeout's abandon.
 *
 * A run ends once. Each strategy writes the end as a guarded transition: the run's status (still running
 * or queued) and its lease generation (and owner) are compared and the end set in one statement, with
 * the webhook delivery in the same transaction. Of two processes that both think they may end a run (an
 * owner blocked past its lease, and the process whose lease rescue ended it meanwhile), the first writes
 * the end and its delivery; the other writes nothing, sends nothing, and says what it dropped.
 */
import type { Insertable, Kysely, Updateable } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import type { Database, RunMode } from "../store/mod.ts";
import { runRowWith } from "../store/statements/run_rows.ts";
import type { RunTable } from "../store/schema.ts";
import { type NewDelivery, webhookBody } from "../webhooks/mod.ts";
import type { LeasedFinishes } from "./_leased_finishes.ts";
import { RunEndedElsewhere } from "./_record_commits.ts";
import { type EndToStore, finishRun, type FinishWhere, type RunOutcome } from "./_queries.ts";
import type { FinishedRun, RunEvents } from "./_run_events.ts";
import type { RunRow } from "./_view.ts";
import type { WriteBehind } from "./_write_behind.ts";

/** A run as its end needs it: who it is, when it started, its webhook (sealed). */
export type EndingRun =
  & Pick<
    RunRow,
    | "run_id"
    | "project_id"
    | "app_id"
    | "function_name"
    | "mode"
    | "webhook_endpoint"
    | "webhook_secret"
    | "webhook_credentials"
  >
  & { started_at: number | null; queue_time_ms?: number | null; lease_generation?: number | null };

/** A run's end: what is stored (`EndToStore`) and the event told once it is. */
export interface RunEnd extends EndToStore {
  outcome: RunOutcome;
  event: FinishedRun;
}

/** How a run ended, besides its outcome. */
export interface RunEndOptions {
  /** When it ended (its `completed_at`), on the store's clock. */
  now: number;
  /**
   * How long it ran, measured on the monotonic clock; null when it was cut off without a measure (a
   * dead process's run); default `now` − `started_at` (null for a run that never started).
   */
  runTimeMs?: number | null;
  /** The mode it ended in, when not its record's (a sync call whose function streamed: `stream`). */
  mode?: RunMode;
  /** The caller's request line reports this end (a sync or stream call). */
  loggedByCaller?: boolean;
  /** The deployment whose replica took the call, when one did and the stored run does not say so yet. */
  deploymentId?: string;
}

/** The columns a run's outcome sets: status, times, result or error; the secrets and lease go with the end. */
function outcomeColumns(outcome: RunOutcome, completedAt: number, runTimeMs: number | null): Updateable<RunTable> {
  return {
    status: outcome.status,
    completed_at: completedAt,
    run_time_ms: runTimeMs,
    result_json: outcome.status === "success" ? outcome.result.json : null,
    result_truncated: outcome.status === "success" && outcome.result.truncated ? 1 : 0,
    error_type: outcome.status === "failure" ? outcome.error.type : null,
    error_message: outcome.status === "failure" ? outcome.error.message : null,
    error_traceback: outcome.status === "failure" ? outcome.error.traceback : null,
    // An async run's input stays (shown with the run, and run again) until its result expires.
    webhook_secret: null,
    webhook_credentials: null,
    lease_owner: null,
    lease_expires_at: null,
  };
}

/** The webhook body of a finished run: its result as stored (the same limit applies). */
function deliveryBody(runId: string, outcome: RunOutcome, runTimeMs: number | null, now: number): string {
  const success = outcome.status === "success";
  return webhookBody({
    run_id: runId,
    status: outcome.status,
    result_truncated: success && outcome.result.truncated,
    error: outcome.status === "failure" ? outcome.error : null,
    run_time_ms: runTimeMs,
  }, { resultJson: success ? outcome.result.json : null, now });
}

/** Makes `run`'s end with `outcome`. */
export function runEnd(run: EndingRun, outcome: RunOutcome, options: RunEndOptions): RunEnd {
  const { now } = options;
  const runTimeMs = options.runTimeMs !== undefined
    ? options.runTimeMs
    : run.started_at === null
    ? null
    : Math.max(0, now - Number(run.started_at));
  const columns = outcomeColumns(outcome, now, runTimeMs);
  if (options.mode !== undefined) columns.mode = options.mode;
  if (options.deploymentId !== undefined) columns.deployment_id = options.deploymentId;
  const delivery: NewDelivery | null = run.webhook_endpoint
    ? {
      runId: run.run_id,
      endpoint: run.webhook_endpoint,
      body: deliveryBody(run.run_id, outcome, runTimeMs, now),
      sealedSecret: run.webhook_secret,
      sealedCredentials: run.webhook_credentials,
    }
    : null;
  const event: FinishedRun = {
    runId: run.run_id,
    projectId: run.project_id,
    appId: run.app_id,
    functionName: run.function_name,
    mode: options.mode ?? run.mode,
    status: outcome.status,
    runTimeMs,
    errorType: outcome.status === "failure" ? outcome.error.type : null,
    queueTimeMs: run.queue_time_ms === undefined || run.queue_time_ms === null ? null : Number(run.queue_time_ms),
    loggedByCaller: options.loggedByCaller,
  };
  const leaseGeneration = run.lease_generation === undefined || run.lease_generation === null
    ? null
    : Number(run.lease_generation);
  return { runId: run.run_id, now, columns, delivery, outcome, event, leaseGeneration };
}

/**
 * Ends a sync or stream call: its final row goes to the write-behind with its delivery, and its end is
 * told at once (its caller answers from it). Resolves once a final state with a webhook is committed
 * (rejects with `RecordNotStored` when it could not be, and with a 409 `interrupted` or `conflict`
 * problem when the run had been ended elsewhere first: its outcome was dropped, so its caller must not
 * get it); at once without a webhook (a dropped outcome is then only logged, by the writer).
 */
export function endLiveRun(
  deps: { writer: WriteBehind; events: RunEvents },
  row: Insertable<RunTable>,
  end: RunEnd,
): Promise<void> {
  deps.writer.put(runRowWith(row, end.columns), end.delivery ?? undefined);
  deps.events.finished(end.event);
  // A webhook must survive a crash right after the caller got the answer: its record is committed now
  // (one small transaction) rather than in the next batch.
  if (!end.delivery) return Promise.resolve();
  return deps.writer.commitSoon(end.runId).catch((error: unknown) => {
    if (!(error instanceof RunEndedElsewhere)) throw error;
    throw endedElsewhereProblem(error);
  });
}

/** What the caller of a run ended elsewhere is told: the stored end, which its webhook told too. */
function endedElsewhereProblem(error: RunEndedElsewhere): ProblemError {
  const { stored } = error;
  const interrupted = stored.status === "failure" && stored.error_type === "interrupted";
  const how = stored.error_type ? `${stored.status} (${stored.error_type})` : stored.status;
  return new ProblemError(
    interrupted ? "interrupted" : "conflict",
    `Run ${error.runId} was ended ${how} by another server before its outcome could be stored here (this server could not reach the store for longer than the run's lease); the record and its webhook say ${how}, and this call's outcome was dropped`,
    { runId: error.runId, cause: error },
  );
}

/**
 * Ends an async run this process ran under its lease, in the leased batch; tells its end once it is
 * stored. Resolves with false when the run had been ended elsewhere first (its outcome is dropped).
 */
export async function endLeasedRun(
  deps: { finishes: LeasedFinishes; events: RunEvents },
  end: RunEnd,
): Promise<boolean> {
  if (!(await deps.finishes.finish(end))) return false;
  deps.events.finished(end.event);
  return true;
}

/**
 * Ends a run where it is stored, if it is still as `where` says (see `finishRun`), with its delivery in
 * the same transaction; tells its end when this call ended it. Resolves with false when the run had been
 * ended elsewhere first.
 */
export async function endStoredRun(
  deps: { db: Kysely<Database>; events: RunEvents },
  end: RunEnd,
  where: FinishWhere,
): Promise<boolean> {
  if (!(await finishRun(deps.db, end, where))) return false;
  deps.events.finished(end.event);
  return true;
}
