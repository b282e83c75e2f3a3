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

/**
 * A row's values in the order of `COLUMNS`, a column it leaves out as NULL or, where the column is NOT
 * NULL with a default, as that default. Written out, not a loop over the column names: each value is a
 * named property read (a keyed read by a variable name is ~20× slower on V8, and a batch makes 27 a row).
 */
function parameters(row: Insertable<RunTable>): unknown[] {
  return [
    row.run_id,
    row.project_id,
    row.app_id,
    row.function_name,
    row.method ?? "POST",
    row.mode,
    row.status,
    row.created_at,
    row.started_at ?? null,
    row.completed_at ?? null,
    row.queue_time_ms ?? null,
    row.run_time_ms ?? null,
    row.input_json ?? null,
    row.result_json ?? null,
    row.result_truncated ?? 0,
    row.error_type ?? null,
    row.error_message ?? null,
    row.error_traceback ?? null,
    row.webhook_endpoint ?? null,
    row.webhook_secret ?? null,
    row.webhook_credentials ?? null,
    row.lease_owner ?? null,
    row.lease_expires_at ?? null,
    row.rerun_of ?? null,
    row.deployment_id ?? null,
    row.lease_generation ?? 0,
    row.websocket_json ?? null,
  ];
}

// `parameters` and `COLUMNS` must list the columns in one order: checked once, as the module loads.
if (parameters(Object.fromEntries(COLUMNS.map((c) => [c, c])) as never).join() !== COLUMNS.join()) {
  throw new Error("run_rows.ts: parameters() must list the columns in the order of COLUMN_TYPES");
}

/**
 * `row` with the columns `over` sets (those not undefined) over it, as one literal of every column
 * written here, each a named property read. On Node 20 `Object.assign({}, row, over)` makes a
 * dictionary-mode object (~1 µs, and slow to read), `{ ...row, ...over }` takes ~10 µs, and a loop
 * over the column names reads each property by a variable name (~0.4 µs); this takes a fraction of that.
 */
export function runRowWith(row: Insertable<RunTable>, over: Updateable<RunTable>): Insertable<RunTable> {
  const merged = {
    run_id: over.run_id !== undefined ? over.run_id : row.run_id,
    project_id: over.project_id !== undefined ? over.project_id : row.project_id,
    app_id: over.app_id !== undefined ? over.app_id : row.app_id,
    function_name: over.function_name !== undefined ? over.function_name : row.function_name,
    method: over.method !== undefined ? over.method : row.method,
    mode: over.mode !== undefined ? over.mode : row.mode,
    status: over.status !== undefined ? over.status : row.status,
    created_at: over.created_at !== undefined ? over.created_at : row.created_at,
    started_at: over.started_at !== undefined ? over.started_at : row.started_at,
    completed_at: over.completed_at !== undefined ? over.completed_at : row.completed_at,
    queue_time_ms: over.queue_time_ms !== undefined ? over.queue_time_ms : row.queue_time_ms,
    run_time_ms: over.run_time_ms !== undefined ? over.run_time_ms : row.run_time_ms,
    input_json: over.input_json !== undefined ? over.input_json : row.input_json,
    result_json: over.result_json !== undefined ? over.result_json : row.result_json,
    result_truncated: over.result_truncated !== undefined ? over.result_truncated : row.result_truncated,
    error_type: over.error_type !== undefined ? over.error_type : row.error_type,
    error_message: over.error_message !== undefined ? over.error_message : row.error_message,
    error_traceback: over.error_traceback !== undefined ? over.error_traceback : row.error_traceback,
    webhook_endpoint: over.webhook_endpoint !== undefined ? over.webhook_endpoint : row.webhook_endpoint,
    webhook_secret: over.webhook_secret !== undefined ? over.webhook_secret : row.webhook_secret,
    webhook_credentials: over.webhook_credentials !== undefined ? over.webhook_credentials : row.webhook_credentials,
    lease_owner: over.lease_owner !== undefined ? over.lease_owner : row.lease_owner,
    lease_expires_at: over.lease_expires_at !== undefined ? over.lease_expires_at : row.lease_expires_at,
    rerun_of: over.rerun_of !== undefined ? over.rerun_of : row.rerun_of,
    deployment_id: over.deployment_id !== undefined ? over.deployment_id : row.deployment_id,
    lease_generation: over.lease_generation !== undefined ? over.lease_generation : row.lease_generation,
    websocket_json: over.websocket_json !== undefined ? over.websocket_json : row.websocket_json,
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
    const values = chunkParameters(rows, { at, count });
    if (owner !== undefined) values.push(owner);
    for (const { run_id } of (await statement(db, values)).rows) written.add(run_id);
    at += count;
  }
  return written;
}

/** The parameters of `count` rows from `at`, row after row. */
function chunkParameters(rows: ReadonlyArray<Insertable<RunTable>>, chunk: { at: number; count: number }): unknown[] {
  const values: unknown[] = [];
  for (let i = chunk.at; i < chunk.at + chunk.count; i++) {
    const row = parameters(rows[i]);
    for (let j = 0; j < row.length; j++) values.push(row[j]);
  }
  return values;
}

const insertAllNewMany = new Map<number, ReturnType<typeof rawStatement>>();

/**
 * `insertNewRuns` without learning which rows were written: resolves true when every row was inserted
 * (each statement's count of rows written is its count of rows), false when some run was stored already.
 * False leaves the other rows inserted: the caller rolls its transaction back and writes the batch again
 * with `insertNewRuns`. The ids `RETURNING` reads back cost SQLite ~15 % of the insert, and a run
 * never written before is stored already only after a try whose commit's answer was lost.
 */
export async function insertAllNewRuns(db: Queryable, rows: ReadonlyArray<Insertable<RunTable>>): Promise<boolean> {
  for (let at = 0; at < rows.length;) {
    let count = UPSERT_CHUNK;
    while (count > rows.length - at) count /= 2;
    let statement = insertAllNewMany.get(count);
    if (!statement) {
      statement = rawStatement({
        sqlite: INSERT_INTO + new Array(count).fill(VALUES).join(", ") + INSERT_ALL_NEW_TAIL,
        postgres: INSERT_UNNEST + INSERT_ALL_NEW_TAIL,
        postgresParameters: (flat) => byColumn(flat, COLUMNS.length),
      });
      insertAllNewMany.set(count, statement);
    }
    const result = await statement(db, chunkParameters(rows, { at, count }));
    if (Number(result.numAffectedRows ?? -1) !== count) return false;
    at += count;
  }
  return true;
}

const INSERT_ALL_NEW_TAIL = ` on conflict ("run_id") do nothing`;

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
