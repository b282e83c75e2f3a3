/**
 * Whole run rows written by the hot paths (async accept, sync and stream records) with precompiled
 * statements: one column list, a missing column is written as NULL (or its default).
 */
import type { Insertable } from "kysely";
import { type Queryable, rawStatement } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";

const COLUMNS = [
  "run_id",
  "project_id",
  "app_id",
  "function_name",
  "mode",
  "status",
  "created_at",
  "started_at",
  "completed_at",
  "queue_time_ms",
  "run_time_ms",
  "input_json",
  "result_json",
  "result_truncated",
  "error_type",
  "error_message",
  "error_traceback",
  "webhook_endpoint",
  "webhook_secret",
  "webhook_credentials",
  "lease_owner",
  "lease_expires_at",
  "rerun_of",
] as const satisfies ReadonlyArray<keyof RunTable>;

const INSERT_INTO = `insert into "runs" (${COLUMNS.map((c) => `"${c}"`).join(", ")}) values `;
const VALUES = `(${COLUMNS.map(() => "?").join(", ")})`;
const INSERT = INSERT_INTO + VALUES;
const insert = rawStatement(INSERT);
/** Multi-row inserts by row count, made on first use (a group commit's batches are at most a few hundred rows). */
const insertMany = new Map<number, ReturnType<typeof rawStatement>>();
// A run another process already ended (e.g. marked interrupted) keeps its final state.
const upsert = rawStatement(
  `${INSERT} on conflict ("run_id") do update set ${COLUMNS.slice(1).map((c) => `"${c}" = excluded."${c}"`).join(", ")}`
    + ` where "runs"."status" in ('queued', 'running')`,
);

// Columns that are NOT NULL with a default: written as the default when the row leaves them out.
const DEFAULTS: Partial<Record<(typeof COLUMNS)[number], unknown>> = { result_truncated: 0 };

function parameters(row: Insertable<RunTable>): unknown[] {
  const values = new Array<unknown>(COLUMNS.length);
  for (let i = 0; i < COLUMNS.length; i++) values[i] = row[COLUMNS[i]] ?? DEFAULTS[COLUMNS[i]] ?? null;
  return values;
}

/** Inserts a new run. */
export async function insertRun(db: Queryable, row: Insertable<RunTable>): Promise<void> {
  await insert(db, parameters(row));
}

/**
 * Inserts new runs with one statement: on PostgreSQL a batch costs one round trip, not one per row.
 */
export async function insertRuns(db: Queryable, rows: ReadonlyArray<Insertable<RunTable>>): Promise<void> {
  if (rows.length === 0) return;
  if (rows.length === 1) return await insertRun(db, rows[0]);
  let statement = insertMany.get(rows.length);
  if (!statement) {
    statement = rawStatement(INSERT_INTO + new Array(rows.length).fill(VALUES).join(", "));
    insertMany.set(rows.length, statement);
  }
  await statement(db, rows.flatMap(parameters));
}

/** Inserts a run or, while the stored one is still queued or running, replaces it with `row`. */
export async function upsertRun(db: Queryable, row: Insertable<RunTable>): Promise<void> {
  await upsert(db, parameters(row));
}
