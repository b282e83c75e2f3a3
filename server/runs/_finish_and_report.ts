/**
 * Ending a stored run and telling its end: what upkeep and a cancel do. The dispatcher ends its runs in
 * shared commits (`_leased_finishes.ts`) and tells them with `reportFinished` too.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import { finishRun, type FinishRunOptions, type RunOutcome } from "./_queries.ts";
import type { RunEvents } from "./_run_events.ts";
import type { RunRow } from "./_view.ts";

/** Options of `finishAndReport`. */
export interface FinishAndReportOptions extends FinishRunOptions {
  db: Kysely<Database>;
  events: RunEvents;
  /** The run time reported (the metric and the `run finished` line); null when the run was cut off. */
  runTimeMs: number | null;
  queueTimeMs?: number | null;
}

/**
 * Ends `row` with its outcome (and webhook delivery, see `finishRun`) and, when this call ended it,
 * reports the end to `events`. Resolves with false when the run had been ended elsewhere first.
 */
export async function finishAndReport(
  row: RunRow,
  options: FinishAndReportOptions,
): Promise<boolean> {
  const ended = await finishRun(options.db, row, options);
  if (!ended) return false;
  reportFinished(options.events, row, options);
  return true;
}

/** Tells `events` that `row` ended with `outcome` (once its end is committed). */
export function reportFinished(
  events: RunEvents,
  row: RunRow,
  options: { outcome: RunOutcome; runTimeMs: number | null; queueTimeMs?: number | null },
): void {
  const { outcome } = options;
  events.finished({
    runId: row.run_id,
    projectId: row.project_id,
    appId: row.app_id,
    functionName: row.function_name,
    mode: row.mode,
    status: outcome.status,
    runTimeMs: options.runTimeMs,
    errorType: outcome.status === "failure" ? outcome.error.type : null,
    queueTimeMs: options.queueTimeMs,
  });
}
