/** A stored run row as the contract's `Run`. */
import type { components } from "../../generated/api.d.ts";
import type { RunTable } from "../store/schema.ts";
import type { WebhookView } from "../webhooks/mod.ts";

/** The contract's `Run`. */
export type Run = components["schemas"]["Run"];

/** A run's stored columns (what `selectAll` gives). */
export type RunRow = Omit<RunTable, "result_expired" | "cancel_requested"> & {
  result_expired: number;
  cancel_requested: number;
};

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(Number(ms)).toISOString();
}

/** Whether the run's result has outlived `resultTtlMs` (removed or about to be). */
export function resultExpired(row: RunRow, resultTtlMs: number, now: number): boolean {
  return row.result_expired === 1 || (row.completed_at !== null && Number(row.completed_at) + resultTtlMs <= now);
}

/** The `Run` for a row and its webhook's state. */
export function toRun(row: RunRow, options: { webhook: WebhookView | null; resultTtlMs: number; now: number }): Run {
  const expired = row.status === "success" && resultExpired(row, options.resultTtlMs, options.now);
  return {
    run_id: row.run_id,
    project_id: row.project_id,
    app_id: row.app_id,
    function_name: row.function_name,
    mode: row.mode as Run["mode"],
    status: row.status as Run["status"],
    created_at: iso(row.created_at)!,
    started_at: iso(row.started_at),
    completed_at: iso(row.completed_at),
    queue_time_ms: row.queue_time_ms,
    run_time_ms: row.run_time_ms,
    result: expired || row.result_json === null ? null : JSON.parse(row.result_json),
    result_expired: expired,
    error: row.error_type === null
      ? null
      : { type: row.error_type, message: row.error_message ?? "", traceback: row.error_traceback },
    webhook: row.webhook_endpoint === null ? null : {
      endpoint: row.webhook_endpoint,
      status: options.webhook?.status ?? "pending",
      attempts: options.webhook?.attempts ?? [],
    },
  };
}
