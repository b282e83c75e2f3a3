/**
 * Whole run rows written by the hot paths (async accept, sync and stream records) with precompiled
 * statements: one column list, a missing column is written as NULL (or its default).
 */
import type { Insertable, Updateable } from "kysely";
import { type Queryable, rawStatement } from "../mod.ts";
import { OPEN_RUN_STATUSES, sqlStatus, sqlStatusList, type TerminalRunStatus } from "../run_states.ts";
import type { RunTable } from "../schema.ts";

// Each column with its PostgreSQL type (for the batch insert's arrays).
const COLUMN_TYPES = {
  run_id: "text",
  project_id: "text",
  app_id: "text",
  function_name: "text",
  method: "text",
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
  deployment_id: "text",
  lease_generation: "integer",
  websocket_json: "text",
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

/** The rows' parameters (row after row, `width` each) as one array per column. */
function byColumn(parameters: readonly unknown[], width: number): unknown[][] {
  const columns = Array.from({ length: width }, () => new Array<unknown>(parameters.length / width));
  for (let i = 0; i < parameters.length; i++) columns[i % width][Math.floor(i / width)] = parameters[i];
  return columns;
}
// A run ends once: a stored run is replaced only while it is still queued or running in the holding the
// row was written in (its lease generation) and not held by another owner (the last parameter). A run
// another process ended (a lease rescue's `interrupted`, a cancel) keeps that end: the conflict updates
// nothing, so the run is not in the ids returned and its writer stores no delivery for it.
const UPSERT_TAIL = (owner: string) =>
  ` on conflict ("run_id") do update set ${COLUMNS.slice(1).map((c) => `"${c}" = excluded."${c}"`).join(", ")}`
  + ` where "runs"."status" in ${
    sqlStatusList(OPEN_RUN_STATUSES)
  } and "runs"."lease_generation" = excluded."lease_generation"`
  + ` and ("runs"."lease_owner" is null or "runs"."lease_owner" = ${owner})`
  + ` returning "run_id"`;
/**
 * Multi-row upserts by row count, a power of two up to `UPSERT_CHUNK` (so at most 9 texts): one
 * statement per chunk costs SQLite ~5 µs a row less than a statement per row, and PostgreSQL one round
 * trip per chunk. PostgreSQL runs one `unnest` text for every count, the owner last.
 */
const UPSERT_CHUNK = 256;
const upsertMany = new Map<number, ReturnType<typeof rawStatement<{ run_id: string }>>>();

// Columns that are NOT NULL with a default: written as the default when the row leaves them out.
const DEFAULTS: Partial<Record<(typeof COLUMNS)[number], unknown>> = {
  result_truncated: 0,
  lease_generation: 0,
  method: "POST",
};

function parameters(row: Insertable<RunTable>): unknown[] {
  const values = new Array<unknown>(COLUMNS.length);
  for (let i = 0; i < COLUMNS.length; i++) values[i] = row[COLUMNS[i]] ?? DEFAULTS[COLUMNS[i]] ?? null;
  return values;
}

/**
 * `row` with the columns `over` sets (those not undefined) over it, as one literal of every column
 * written here. On Node 20 `Object.assign({}, row, over)` makes a dictionary-mode object (~1 µs, and
 * slow to read) and `{ ...row, ...over }` takes ~10 µs; this takes ~0.4 µs.
 */
export function runRowWith(row: Insertable<RunTable>, over: Updateable<RunTable>): Insertable<RunTable> {
  const value = (column: (typeof COLUMNS)[number]) => over[column] !== undefined ? over[column] : row[column];
  const merged = {
    run_id: value("run_id"),
    project_id: value("project_id"),
    app_id: value("app_id"),
    function_name: value("function_name"),
    method: value("method"),
    mode: value("mode"),
    status: value("status"),
    created_at: value("created_at"),
    started_at: value("started_at"),
    completed_at: value("completed_at"),
    queue_time_ms: value("queue_time_ms"),
    run_time_ms: value("run_time_ms"),
    input_json: value("input_json"),
    result_json: value("result_json"),
    result_truncated: value("result_truncated"),
    error_type: value("error_type"),
    error_message: value("error_message"),
    error_traceback: value("error_traceback"),
    webhook_endpoint: value("webhook_endpoint"),
    webhook_secret: value("webhook_secret"),
    webhook_credentials: value("webhook_credentials"),
    lease_owner: value("lease_owner"),
    lease_expires_at: value("lease_expires_at"),
    rerun_of: value("rerun_of"),
    deployment_id: value("deployment_id"),
    lease_generation: value("lease_generation"),
    websocket_json: value("websocket_json"),
  } satisfies Record<(typeof COLUMNS)[number], unknown>;
  return merged as Insertable<RunTable>;
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
      postgresParameters: (flat) => byColumn(flat, COLUMNS.length),
    });
    insertMany.set(rows.length, statement);
  }
  await statement(db, rows.flatMap(parameters));
}

/**
 * Inserts runs or, while a stored one is still queued or running in the row's lease generation and not
 * held by another owner than `owner`, replaces it with its row: compared and set in the one statement,
 * so a run ended elsewhere (a lease rescue, a cancel) keeps that end. Each run at most once (PostgreSQL
 * refuses a statement that updates a row twice). Resolves with the ids of the runs written (the others
 * had ended otherwise, and keep that end).
 */
export async function upsertRuns(
  db: Queryable,
  rows: ReadonlyArray<Insertable<RunTable>>,
  owner: string,
): Promise<Set<string>> {
  return await inChunks(db, rows, { statements: upsertMany, tail: UPSERT_TAIL, owner });
}

/**
 * Inserts runs none of whose states was ever written before (their first write): cheaper than
 * `upsertRuns` (SQLite ~2 µs a row less: no update to prepare, no row to compare). A run already
 * stored can only be this same write's, committed by a try whose answer was lost; it is left as it is
 * and not in the ids this resolves with (the ids of the runs written), as `upsertRuns` leaves a run
 * ended otherwise.
 */
export async function insertNewRuns(db: Queryable, rows: ReadonlyArray<Insertable<RunTable>>): Promise<Set<string>> {
  return await inChunks(db, rows, { statements: insertNewMany, tail: () => INSERT_NEW_TAIL });
}

const INSERT_NEW_TAIL = ` on conflict ("run_id") do nothing returning "run_id"`;
const insertNewMany = new Map<number, ReturnType<typeof rawStatement<{ run_id: string }>>>();

/**
 * Writes `rows` with one statement per chunk (a power of two up to `UPSERT_CHUNK` rows): the insert of
 * every column followed by `tail` (given its owner's placeholder when `owner` is given, which is then
 * the last parameter). Resolves with the ids the statements returned.
 */
async function inChunks(
  db: Queryable,
  rows: ReadonlyArray<Insertable<RunTable>>,
  options: {
    statements: Map<number, ReturnType<typeof rawStatement<{ run_id: string }>>>;
    tail: (ownerPlaceholder: string) => string;
    owner?: string;
  },
): Promise<Set<string>> {
  const { statements, tail, owner } = options;
  const written = new Set<string>();
  for (let at = 0; at < rows.length;) {
    let count = UPSERT_CHUNK;
    while (count > rows.length - at) count /= 2;
    let statement = statements.get(count);
    if (!statement) {
      const insert = INSERT_INTO + new Array(count).fill(VALUES).join(", ");
      statement = rawStatement<{ run_id: string }>(
        owner === undefined
          ? {
            sqlite: insert + tail(""),
            postgres: INSERT_UNNEST + tail(""),
            postgresParameters: (flat) => byColumn(flat, COLUMNS.length),
          }
          : {
            sqlite: insert + tail("?"),
            postgres: INSERT_UNNEST + tail(`$${COLUMNS.length + 1}`),
            postgresParameters: (flat) => [...byColumn(flat.slice(0, -1), COLUMNS.length), flat.at(-1)],
          },
      );
      statements.set(count, statement);
    }
    const values: unknown[] = [];
    for (let i = at; i < at + count; i++) values.push(...parameters(rows[i]));
    if (owner !== undefined) values.push(owner);
    for (const { run_id } of (await statement(db, values)).rows) written.add(run_id);
    at += count;
  }
  return written;
}

/** The final state of a run this process ran under its lease (see `endLeasedRuns`). */
export interface LeasedRunEnd {
  run_id: string;
  status: TerminalRunStatus;
  completed_at: number;
  run_time_ms: number | null;
  result_json: string | null;
  result_truncated: number;
  error_type: string | null;
  error_message: string | null;
  error_traceback: string | null;
  /** Null keeps the stored one. */
  deployment_id: string | null;
  /** The lease generation of the claim it ran under; null: the owner's lease alone decides. */
  lease_generation: number | null;
}

const END_TYPES = {
  run_id: "text",
  status: "text",
  completed_at: "bigint",
  run_time_ms: "double precision",
  result_json: "text",
  result_truncated: "integer",
  error_type: "text",
  error_message: "text",
  error_traceback: "text",
  deployment_id: "text",
  lease_generation: "integer",
} as const satisfies Record<keyof LeasedRunEnd, string>;
const END_COLUMNS = Object.keys(END_TYPES) as Array<keyof LeasedRunEnd>;
// Columns an end compares but does not set.
const COMPARED_ONLY = new Set<string>(["lease_generation"]);
// Columns an end sets only when it knows them (otherwise the stored value stays).
const KEPT_UNLESS_GIVEN = new Set<string>(["deployment_id"]);
// Secrets, input and lease go with the end; the input stays until the result expires.
const END_SET = END_COLUMNS.slice(1).filter((c) => !COMPARED_ONLY.has(c)).map((c) =>
  KEPT_UNLESS_GIVEN.has(c) ? `"${c}" = coalesce("v"."${c}", "runs"."${c}")` : `"${c}" = "v"."${c}"`
).concat(
  ["webhook_secret", "webhook_credentials", "lease_owner", "lease_expires_at"].map((c) => `"${c}" = null`),
).join(", ");
// Still running under the owner's lease, in the generation it was claimed in: a run ended elsewhere (a
// lease rescue, a cancel), or claimed again since, keeps that end or holding. The owner's placeholder:
// `?` (SQLite) or `$n` (PostgreSQL).
function endWhere(owner: string): string {
  return `where "runs"."run_id" = "v"."run_id" and "runs"."status" = ${
    sqlStatus("running")
  } and "runs"."lease_owner" = ${owner}`
    + ` and ("v"."lease_generation" is null or "runs"."lease_generation" = "v"."lease_generation")`;
}
const END_POSTGRES =
  `update "runs" set ${END_SET} from unnest(${
    END_COLUMNS.map((c, i) => `$${i + 1}::${END_TYPES[c]}[]`).join(", ")
  }) as "v"(${END_COLUMNS.map((c) => `"${c}"`).join(", ")}) ${endWhere(`$${END_COLUMNS.length + 1}`)}`
  + ` returning "runs"."run_id"`;
const endMany = new Map<number, ReturnType<typeof rawStatement<{ run_id: string }>>>();

/**
 * Ends runs that are still `running` under `owner`'s lease in the generation each was claimed in, in
 * one statement, and answers the ids it ended. A run another process ended first (a lease rescue, a
 * cancel) keeps that end. PostgreSQL runs one text whatever the count (`unnest` of one array per
 * column); SQLite a `VALUES` list per count.
 */
export async function endLeasedRuns(
  db: Queryable,
  owner: string,
  ends: readonly LeasedRunEnd[],
): Promise<string[]> {
  if (ends.length === 0) return [];
  let statement = endMany.get(ends.length);
  if (!statement) {
    const values = `(${END_COLUMNS.map(() => "?").join(", ")})`;
    // SQLite names a VALUES list's columns column1, column2, …: select them under the column names.
    const named = END_COLUMNS.map((c, i) => `"column${i + 1}" as "${c}"`).join(", ");
    statement = rawStatement<{ run_id: string }>({
      sqlite: `update "runs" set ${END_SET} from (select ${named} from (values ${
        new Array(ends.length).fill(values).join(", ")
      })) as "v" ${endWhere("?")} returning "runs"."run_id"`,
      postgres: END_POSTGRES,
      postgresParameters: (parameters) => [
        ...byColumn(parameters.slice(0, -1), END_COLUMNS.length),
        parameters[parameters.length - 1],
      ],
    });
    endMany.set(ends.length, statement);
  }
  const parameters: unknown[] = [];
  for (const end of ends) for (const column of END_COLUMNS) parameters.push(end[column]);
  parameters.push(owner);
  const { rows } = await statement(db, parameters);
  return rows.map((row) => row.run_id);
}
