/**
 * Run records made in bulk inside the database (a recursive CTE on SQLite, `generate_series` on
 * PostgreSQL), for the growth scenarios: a million rows in seconds, not a million statements. Run ids are
 * `run_` + the row's number in 26 digits, so they sort by number as real ids sort by time.
 */
import { sql } from "kysely";
import type { Store } from "../../server/store/mod.ts";

/** Options of `addRuns`. */
export interface BulkRunsOptions {
  /** Row numbers `from` to `to`, both included. */
  from: number;
  to: number;
  /** `ended`: finished runs of apps `app-0` … `app-9` (1 in 25 failed, 1 in 50 cancelled); `queued`: of `app`. */
  kind: "ended" | "queued";
  /** The app of queued runs. */
  app?: string;
  /** Row `n` was created at `createdAt + n` ms. */
  createdAt: number;
}

const COLUMNS = `"run_id", "project_id", "app_id", "function_name", "mode", "status", "created_at", "started_at",
  "completed_at", "queue_time_ms", "run_time_ms", "input_json", "result_json", "result_truncated", "result_expired",
  "error_type", "error_message", "error_traceback", "webhook_endpoint", "webhook_secret", "webhook_credentials",
  "lease_owner", "lease_expires_at"`;

function selectList(options: BulkRunsOptions, runId: string, n: string, base: string): string {
  if (options.kind === "queued") {
    return `${runId}, 'p-bench', '${options.app}', 'run', 'async', 'queued', ${base} + ${n}, null, null, null, null,
      '{}', null, 0, 0, null, null, null, null, null, null, null, null`;
  }
  const status = `case when ${n} % 50 = 0 then 'cancelled' when ${n} % 25 = 1 then 'failure' else 'success' end`;
  const ok = `${n} % 50 <> 0 and ${n} % 25 <> 1`;
  return `${runId}, 'p-bench', 'app-' || (${n} % 10), 'run', case when ${n} % 3 = 0 then 'async' else 'sync' end,
    ${status}, ${base} + ${n}, ${base} + ${n} + 5, ${base} + ${n} + 55, 5, 50, null,
    case when ${ok} then '{"hello":"world","n":' || ${n} || '}' end, 0, 0,
    case when ${n} % 25 = 1 then 'ValueError' end, case when ${n} % 25 = 1 then 'bad input ' || ${n} end,
    null, null, null, null, null, null`;
}

/** Inserts the rows `from`..`to` in chunks of 100,000 (one statement and transaction each). */
export async function addRuns(store: Store, options: BulkRunsOptions): Promise<void> {
  for (let from = options.from; from <= options.to; from += 100_000) {
    const to = Math.min(options.to, from + 99_999);
    const chunk = { ...options, from, to };
    if (store.engine === "postgres") {
      const runId = `'run_' || lpad(n::text, 26, '0')`;
      await sql.raw(
        `insert into "runs" (${COLUMNS}) select ${
          selectList(chunk, runId, "n", `${options.createdAt}::bigint`)
        } from generate_series(${from}::bigint, ${to}::bigint) as n`,
      ).execute(store.db);
    } else {
      const runId = `'run_' || substr('00000000000000000000000000' || n, -26)`;
      await sql.raw(
        `with recursive seq(n) as (select ${from} union all select n + 1 from seq where n < ${to}) insert into "runs" (${COLUMNS}) select ${
          selectList(chunk, runId, "n", String(options.createdAt))
        } from seq`,
      ).execute(store.db);
    }
  }
}

/** The run id of row `n`. */
export function bulkRunId(n: number): string {
  return `run_${String(n).padStart(26, "0")}`;
}
