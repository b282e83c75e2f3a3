/** A stored run row as the contract's `Run`. */
import type { components } from "../../generated/api.d.ts";
import type { RunTable } from "../store/schema.ts";
import type { WebhookView } from "../webhooks/mod.ts";

/** The contract's `Run`. */
export type Run = components["schemas"]["Run"];

/** The contract's `RunSummary`: a run as listed, without its result. */
export type RunSummary = components["schemas"]["RunSummary"];

/** A run's stored columns (what `selectAll` gives). */
export type RunRow =
  & Omit<
    RunTable,
    "result_expired" | "result_truncated" | "cancel_requested" | "lease_generation" | "method"
  >
  & {
    method: string;
    result_expired: number;
    result_truncated: number;
    cancel_requested: number;
    lease_generation: number;
  };

/** The columns a listed run is read with (no result, input or secret). */
export type RunSummaryRow = Omit<
  RunRow,
  | "result_json"
  | "input_json"
  | "webhook_secret"
  | "lease_owner"
  | "lease_expires_at"
  | "cancel_requested"
  | "swept_owner"
  | "lease_generation"
>;

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(Number(ms)).toISOString();
}

/** Whether the run's result has outlived `resultTtlMs` (removed or about to be). */
export function resultExpired(row: RunSummaryRow, resultTtlMs: number, now: number): boolean {
  return row.result_expired === 1 || (row.completed_at !== null && Number(row.completed_at) + resultTtlMs <= now);
}

/** Options of `toRun` and `toRunSummary`. */
export interface RunViewOptions {
  webhook: WebhookView | null;
  resultTtlMs: number;
  now: number;
  /** The runs that ran this one again (a whole run's view only). */
  reruns?: string[];
}

/** The `Run` for a row and its webhook's state. */
export function toRun(row: RunRow, options: RunViewOptions): Run {
  const summary = toRunSummary(row, options);
  return {
    ...summary,
    result: summary.result_expired || row.result_json === null ? null : JSON.parse(row.result_json),
    input: row.mode === "async" && row.input_json !== null && row.result_expired !== 1
      ? JSON.parse(row.input_json)
      : null,
    rerun_of: row.rerun_of,
    reruns: options.reruns ?? [],
  };
}

/** The `RunSummary` (no result) for a row and its webhook's state. */
export function toRunSummary(row: RunSummaryRow, options: RunViewOptions): RunSummary {
  const expired = row.status === "success" && resultExpired(row, options.resultTtlMs, options.now);
  return {
    run_id: row.run_id,
    project_id: row.project_id,
    app_id: row.app_id,
    function_name: row.function_name,
    method: row.method as Run["method"],
    mode: row.mode as Run["mode"],
    status: row.status,
    created_at: iso(row.created_at)!,
    started_at: iso(row.started_at),
    completed_at: iso(row.completed_at),
    queue_time_ms: row.queue_time_ms,
    run_time_ms: row.run_time_ms,
    deployment_id: row.deployment_id ?? null,
    result_expired: expired,
    result_truncated: row.result_truncated === 1,
    error: row.error_type === null
      ? null
      : { type: row.error_type, message: row.error_message ?? "", traceback: row.error_traceback },
    webhook: row.webhook_endpoint === null ? null : {
      endpoint: row.webhook_endpoint,
      status: options.webhook?.status ?? "pending",
      attempts: options.webhook?.attempts ?? [],
    },
    websocket: row.websocket_json === null ? null : JSON.parse(row.websocket_json),
  };
}
