/**
 * Whole run rows written by the hot paths (async accept, sync and stream records) with precompiled
 * statements: one column list, a missing column is written as NULL (or its default).
 */
import type { Insertable } from "kysely";
import { type Queryable, rawStatement } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";

// Each column with its PostgreSQL type (for the batch insert's arrays).
const COLUMN_TYPES = {
  run_id: "text",
  project_id: "text",
  app_id: "text",
  function_name: "text",
  mode: "text",
  status: "text",
  created_at: "bigint",
  started_at: "bigint",
  completed_at: "bigint",
  queue_time_ms: "double precision",
  run_time_ms: "double precision",
  input_json: "text",
  result_json: "text",
  result_truncated: "integer",
  error_type: "text",
  error_message: "text",
  error_traceback: "text",
  webhook_endpoint: "text",
  webhook_secret: "text",
  webhook_credentials: "text",
  lease_owner: "text",
  lease_expires_at: "bigint",
  rerun_of: "text",
} as const satisfies Partial<Record<keyof RunTable, string>>;
const COLUMNS = Object.keys(COLUMN_TYPES) as Array<keyof typeof COLUMN_TYPES>;

const INSERT_INTO = `insert into "runs" (${COLUMNS.map((c) => `"${c}"`).join(", ")}) values `;
const VALUES = `(${COLUMNS.map(() => "?").join(", ")})`;
const INSERT = INSERT_INTO + VALUES;
const insert = rawStatement(INSERT);
/**
 * Multi-row inserts by row count, made on first use (a group commit's batches are at most a few hundred
 * rows). PostgreSQL runs one text for every count: `unnest` of one array per column. A multi-row
 * `VALUES` of 32 rows has 736 parameters that PostgreSQL parses and plans anew each time (a statement
 * without a name, so that PgBouncer in transaction mode works); 23 arrays cost it a fraction of that.
 */
const insertMany = new Map<number, ReturnType<typeof rawStatement>>();
const INSERT_UNNEST = `insert into "runs" (${COLUMNS.map((c) => `"${c}"`).join(", ")}) select * from unnest(${
  COLUMNS.map((c, i) => `$${i + 1}::${COLUMN_TYPES[c]}[]`).join(", ")
})`;

/** The rows' parameters (row after row) as one array per column. */
function byColumn(parameters: readonly unknown[]): unknown[][] {
  const columns = COLUMNS.map(() => new Array<unknown>(parameters.length / COLUMNS.length));
  for (let i = 0; i < parameters.length; i++) {
    columns[i % COLUMNS.length][Math.floor(i / COLUMNS.length)] = parameters[i];
  }
  return columns;
}
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
    statement = rawStatement({
      sqlite: INSERT_INTO + new Array(rows.length).fill(VALUES).join(", "),
      postgres: INSERT_UNNEST,
      postgresParameters: byColumn,
    });
    insertMany.set(rows.length, statement);
  }
  await statement(db, rows.flatMap(parameters));
}

/** Inserts a run or, while the stored one is still queued or running, replaces it with `row`. */
export async function upsertRun(db: Queryable, row: Insertable<RunTable>): Promise<void> {
  await upsert(db, parameters(row));
}
