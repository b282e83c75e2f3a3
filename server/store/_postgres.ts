/**
 * The PostgreSQL side of the store: the `pg` pool (with bigints parsed as numbers), Kysely's dialect
 * with `?` placeholders of portable raw statements translated, the migration lock, the clock's read.
 */
import { type CompiledQuery, type DatabaseConnection, PostgresDialect, type QueryResult } from "kysely";
import pg from "pg";
import { postgresPlaceholders } from "./_placeholders.ts";

/** Where a portable raw statement (see `rawStatement`) carries its text with `$n` placeholders. */
const POSTGRES_SQL: unique symbol = Symbol("runplane.postgresSql");

/** Where it carries how PostgreSQL's text takes the parameters, when not as they are. */
const POSTGRES_PARAMETERS: unique symbol = Symbol("runplane.postgresParameters");

/** A compiled query that may carry its PostgreSQL text, and how that text takes the parameters. */
type PortableQuery = CompiledQuery & {
  [POSTGRES_SQL]?: string;
  [POSTGRES_PARAMETERS]?: (parameters: readonly unknown[]) => unknown[];
};

/** The text and parameters PostgreSQL runs for `query` (a portable raw statement's own, or Kysely's). */
export function postgresForm(query: CompiledQuery): { sql: string; parameters: readonly unknown[] } {
  const portable = query as PortableQuery;
  const reshape = portable[POSTGRES_PARAMETERS];
  return {
    sql: portable[POSTGRES_SQL] ?? query.sql,
    parameters: reshape ? reshape(query.parameters) : query.parameters,
  };
}

const INT8_OID = 20;

// `bigint` (our millisecond timestamps) and COUNT(*) arrive as strings by default: parse them as
// numbers (exact up to 2^53, which Unix milliseconds and row counts stay far below).
const TYPES = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === INT8_OID && format !== "binary") return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;

/** Options of `createPostgresPool`. */
export interface PostgresPoolOptions {
  poolSize: number;
  /** Run the fixed texts of portable raw statements as named prepared statements (see `PreparingClient`). */
  preparedStatements: boolean;
  /** Ends a session left idle inside a transaction for longer (milliseconds). */
  idleInTransactionTimeoutMs: number;
  /** The longest a statement may run before the server cancels it (57014), in milliseconds. */
  statementTimeoutMs: number;
  /** Called with errors of connections (e.g. the server ended them); the pool replaces them. */
  onError?(error: Error): void;
}

/**
 * How long getting a connection may take (opening one, or waiting for one of the pool's to be
 * free) before the statement fails as the store being unavailable, instead of waiting for ever.
 */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * The names of the texts `portableQuery` made: fixed texts, written once in the source (a few dozen),
 * unlike Kysely's builder queries, whose texts vary (e.g. with the length of an `in` list).
 */
const STATEMENT_NAMES = new Map<string, string>();

function nameStatement(text: string): void {
  if (!STATEMENT_NAMES.has(text)) STATEMENT_NAMES.set(text, `runplane_${STATEMENT_NAMES.size + 1}`);
}

/**
 * A `pg` client that runs the texts of portable raw statements as named prepared statements:
 * PostgreSQL parses, analyses and plans each once per connection instead of at every call (pg sends
 * the Parse message once per connection and name). These are the hot paths' statements: measured on
 * PostgreSQL 15, the backend's CPU for a 15-run batch insert fell from ~330 to ~200 µs, for the token
 * lookup from ~33 to ~20 µs, and async accept rose ~7% against SQLite in interleaved runs. Behind
 * PgBouncer in transaction mode this needs PgBouncer 1.21 or later with `max_prepared_statements`
 * set; else turn it off (`RUNPLANE_DATABASE_PREPARED_STATEMENTS=false`). Kysely calls
 * `query(text, values)`; every other form passes through.
 */
class PreparingClient extends pg.Client {
  // `any`: pg's overloads of `query`, passed through unchanged.
  override query(config: any, values?: any, callback?: any): any {
    const name = typeof config === "string" ? STATEMENT_NAMES.get(config) : undefined;
    if (name === undefined || typeof values === "function") return super.query(config, values, callback);
    return super.query({ name, text: config, values }, callback);
  }
}

/** A `pg` pool for `url`. */
export function createPostgresPool(url: string, options: PostgresPoolOptions): pg.Pool {
  const pool = new pg.Pool({
    Client: options.preparedStatements ? PreparingClient : pg.Client,
    connectionString: url,
    max: options.poolSize,
    types: TYPES,
    idle_in_transaction_session_timeout: options.idleInTransactionTimeoutMs,
    statement_timeout: options.statementTimeoutMs,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    // A server that vanished without a reset (a host gone, a partition) is found by TCP keepalive.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: "runplane",
  });
  // An 'error' event without a listener ends the process. The pool listens on idle connections only:
  // it removes its listener while a connection is checked out (node-postgres #2439, #2762), so a
  // server restart or pg_terminate_backend during a statement would crash the process. Each connection
  // gets a listener of its own for its whole life; the statement it was running fails on its own.
  pool.on("connect", (client) => client.on("error", (error) => options.onError?.(error)));
  pool.on("error", (error) => options.onError?.(error));
  return pool;
}

/** Kysely's PostgreSQL dialect on `pool`, running portable raw statements with their `$n` text. */
export function postgresDialect(pool: pg.Pool): PostgresDialect {
  return new PostgresDialect({
    pool,
    onCreateConnection(connection: DatabaseConnection) {
      const executeQuery = connection.executeQuery.bind(connection);
      connection.executeQuery = <R>(query: PortableQuery): Promise<QueryResult<R>> => {
        if (query[POSTGRES_SQL] === undefined) return executeQuery<R>(query);
        return executeQuery<R>({ ...query, ...postgresForm(query) });
      };
      return Promise.resolve();
    },
  });
}

/** Options of `portableQuery`. */
export interface PortableQueryOptions {
  /** PostgreSQL's own text, with `$n` placeholders (not translated). */
  postgresSql?: string;
  /** How PostgreSQL's text takes the parameters (e.g. one array per column), when not as they are. */
  postgresParameters?: (parameters: readonly unknown[]) => unknown[];
}

/**
 * `sqlText` (with `?` placeholders) as a compiled query that runs on either engine. With
 * `postgresSql`, PostgreSQL runs that text instead (its own `$n` placeholders, numbered after the
 * same parameters, or after what `postgresParameters` makes of them): for the few statements the
 * engines need written differently.
 */
export function portableQuery(
  sqlText: string,
  options: PortableQueryOptions = {},
): (parameters: readonly unknown[]) => CompiledQuery {
  const postgresSql = options.postgresSql ?? postgresPlaceholders(sqlText);
  nameStatement(postgresSql);
  const reshape = options.postgresParameters;
  return (parameters) =>
    ({
      sql: sqlText,
      parameters,
      query: { kind: "RawNode", sqlFragments: [sqlText], parameters: [] },
      queryId: { queryId: "" },
      [POSTGRES_SQL]: postgresSql,
      [POSTGRES_PARAMETERS]: reshape,
    }) as unknown as CompiledQuery;
}

// "Runplane" in ASCII, as the key of the session advisory lock migrations and key bootstrap run under.
const MIGRATION_LOCK_KEY = "5941776712518954597";

/**
 * Runs `fn` while holding a session advisory lock on its own connection (not one of the pool's), so
 * that processes starting at once migrate one after the other. Needs a direct connection: behind
 * PgBouncer in transaction mode a session lock does not hold.
 */
export async function withMigrationLock<T>(url: string, fn: () => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: "runplane-migrations" });
  await client.connect();
  try {
    await client.query("select pg_advisory_lock($1::bigint)", [MIGRATION_LOCK_KEY]);
    try {
      return await fn();
    } finally {
      await client.query("select pg_advisory_unlock($1::bigint)", [MIGRATION_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}

/** Reads the database server's clock in Unix milliseconds. */
export async function readDatabaseMs(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ now: number }>(
    "select (extract(epoch from clock_timestamp()) * 1000)::float8 as now",
  );
  return rows[0].now;
}

/** `url` with its password (and any `password` query parameter) replaced by `***`, for logs. */
export function redactDatabaseUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    if (parsed.searchParams.has("password")) parsed.searchParams.set("password", "***");
    return parsed.toString();
  } catch {
    return "(an unparsable database URL)";
  }
}

/** Whether `url` names a PostgreSQL database. */
export function isPostgresUrl(url: string): boolean {
  return /^postgres(ql)?:\/\//i.test(url);
}
