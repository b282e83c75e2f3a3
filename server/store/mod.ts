/**
 * The store: one Kysely layer on two engines. SQLite (better-sqlite3, WAL) in the data dir is the
 * embedded default; a `postgres://` database URL selects PostgreSQL (`pg`), which several processes
 * share. Queries are written once, with Kysely's portable builders or portable SQL (`rawStatement`);
 * what differs between the engines stays in this folder.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import {
  type CompiledQuery,
  Kysely,
  type KyselyConfig,
  type MigrationProvider,
  Migrator,
  type QueryResult,
  type SqliteDatabase,
  SqliteDialect,
  type Transaction,
} from "kysely";
import { type Checkpointer, startCheckpointer } from "./checkpointer.ts";
import { type StoreClock, startDatabaseClock, systemClock } from "./clock.ts";
import { MIGRATIONS } from "./_migrations/mod.ts";
import {
  createPostgresPool,
  isPostgresUrl,
  portableQuery,
  postgresDialect,
  postgresForm,
  readDatabaseMs,
  redactDatabaseUrl,
  withMigrationLock,
} from "./_postgres.ts";
import { localNotifier, type Notifier, postgresNotifier } from "./notifier.ts";
import { relayedNotifier, type WakeUpPort } from "./notifier_relay.ts";
import type { Database } from "./schema.ts";

/** Every migration by name, in order (what `migrate` applies). */
export { MIGRATIONS } from "./_migrations/mod.ts";
export { isPostgresUrl, redactDatabaseUrl } from "./_postgres.ts";
export { type BatchedLookup, type BatchedLookupOptions, createBatchedLookup } from "./batched_lookup.ts";
export { type StoreClock } from "./clock.ts";
export { createGroupCommit, type GroupCommit, type GroupCommitOptions } from "./group_commit.ts";
export {
  LISTENER_APPLICATION_NAME,
  MAX_WAKE_PAYLOAD_BYTES,
  type Notifier,
  WAKE_CHANNELS,
  type WakeChannel,
  type WakeListener,
} from "./notifier.ts";
export { isRelayedWakeUp, type RelayedWakeUp, type WakeUpPort } from "./notifier_relay.ts";
export {
  createStoreOutage,
  quietDuringOutages,
  type StoreOutage,
  type StoreOutageOptions,
  storeUnavailableReason,
} from "./outage.ts";
export {
  isTerminal,
  OPEN_RUN_STATUSES,
  type OpenRunStatus,
  PASSING_START_FAILURE_TYPES,
  RUN_FAILURE_TYPES,
  RUN_MODES,
  RUN_START_FAILURE_TYPES,
  RUN_STATUSES,
  type RunFailureType,
  type RunMode,
  type RunStartFailureType,
  type RunStatus,
  TERMINAL_RUN_STATUSES,
  type TerminalRunStatus,
} from "./run_states.ts";
export type { Database } from "./schema.ts";

/** The database engine behind a store. */
export type StoreEngine = "sqlite" | "postgres";

/** An open store. */
export interface Store {
  db: Kysely<Database>;
  engine: StoreEngine;
  /**
   * Whether processes on other hosts may share this store (PostgreSQL): then keys live in it, work is
   * announced to the others, and a process of another host is judged dead by its leases alone. False
   * for SQLite: one host, its keys in the data dir. Ask this, not the engine, outside this folder.
   */
  shared: boolean;
  /** The SQLite file's path, or the database URL with its password redacted. */
  path: string;
  /**
   * The time that decides ownership (leases, expiry): the database server's clock on PostgreSQL (so
   * processes on hosts with skewed clocks agree), the process's on SQLite.
   */
  clock: StoreClock;
  /**
   * Wake-ups between processes (LISTEN/NOTIFY on PostgreSQL, in-process on SQLite): they only shorten
   * the wait for the next poll, which must stay correct alone (see `notifier.ts`).
   */
  notifier: Notifier;
  /** True when this open created the schema (applied the first migration). */
  fresh: boolean;
  /** Closes the connection; pending statements finish first. */
  close(): Promise<void>;
}

/** Options of `openStore`. */
export interface OpenStoreOptions {
  /**
   * A `postgres://` (or `postgresql://`) URL selects PostgreSQL; unset (or null) keeps the SQLite file
   * in the data dir.
   */
  databaseUrl?: string | null;
  /** PostgreSQL: the most connections the pool opens (default 10). */
  poolSize?: number;
  /**
   * PostgreSQL: run the raw statements (the hot paths') as named prepared statements, each planned
   * once per connection (default false: worth it for a server, not for a CLI's few statements).
   */
  preparedStatements?: boolean;
  /** PostgreSQL: a session idle inside a transaction for longer is ended by the server (default 60 s). */
  idleInTransactionTimeoutMs?: number;
  /** PostgreSQL: a statement running for longer is cancelled by the server (57014; default 30 s). */
  statementTimeoutMs?: number;
  /**
   * Errors the store carries on after: PostgreSQL's idle pooled connections, the clock's refresh and
   * the notifier's listening connection (it reconnects); a wake-up listener that threw (both engines).
   */
  onError?(error: unknown): void;
  /**
   * The host's clock (default `Date.now`): SQLite's store clock, and what PostgreSQL's follows the
   * database's against. Tests give one that is off (server/test_hooks).
   */
  localNow?: () => number;
  /** Apply pending migrations (default true). */
  migrate?: boolean;
  /**
   * Runs after the migrations and, on PostgreSQL, under the same advisory lock, so that of processes
   * starting at once one creates what must exist once (e.g. keys) and the others find it.
   */
  bootstrap?(db: Kysely<Database>, store: { shared: boolean }): Promise<void>;
  /**
   * Where WAL checkpoints run: `commit` (SQLite's default: inside the commit that fills the WAL) or
   * `background` (a worker thread; for a server, whose event loop must not stall), or `elsewhere` (none
   * here: another process on the file checkpoints, the host's supervisor). Default `commit`.
   */
  checkpoints?: "commit" | "background" | "elsewhere";
  /**
   * SQLite: the other processes on the same file (the host's workers and supervisor), which get this
   * process's wake-ups and give it theirs (see notifier_relay.ts). PostgreSQL's notifier needs none.
   */
  relay?: WakeUpPort;
  /** Called when the background checkpointer failed; checkpoints are then made in commits again. */
  onCheckpointerLost?(error: unknown): void;
  /** Called when the background checkpointer works again after it failed; commits no longer checkpoint. */
  onCheckpointerBack?(): void;
  /**
   * Told every statement run, with the text and parameters its engine ran (for diagnostics and the
   * query-plan test; it costs a call per statement).
   */
  onStatement?(statement: { sql: string; parameters: readonly unknown[] }): void;
}

/** Kysely's `log` for `onStatement`: the engine's own text of each statement (PostgreSQL's `$n` one for raw statements). */
function statementLog(options: OpenStoreOptions): KyselyConfig["log"] {
  const onStatement = options.onStatement;
  if (!onStatement) return undefined;
  return (event) => {
    const query = event.query;
    onStatement(options.databaseUrl ? postgresForm(query) : { sql: query.sql, parameters: query.parameters });
  };
}

/**
 * Opens the store and applies pending migrations: PostgreSQL when `options.databaseUrl` is given, else
 * (creating if needed) `dataDir/runplane.sqlite3`. Throws when a migration fails, naming it.
 */
export async function openStore(dataDir: string, options: OpenStoreOptions = {}): Promise<Store> {
  if (options.databaseUrl) {
    if (!isPostgresUrl(options.databaseUrl)) {
      throw new Error(`Unsupported database URL ${redactDatabaseUrl(options.databaseUrl)}: expected postgres://`);
    }
    return await openPostgresStore(options.databaseUrl, options);
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "runplane.sqlite3");
  makePrivate(path);
  const sqlite = new BetterSqlite3(path);
  // `exec`, not `pragma`: no `Statement` object (see neverCollected).
  // cache_size: SQLite's own default (2 MiB), where better-sqlite3 builds with 16 MiB. Every uploaded
  // bundle passes through the page cache as it is stored, and left it holding 16 MiB that the runs' pages
  // never needed: the file's pages stay in the kernel's cache, a read away.
  sqlite.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000; PRAGMA cache_size = -2000",
  );
  sqlite.exec("PRAGMA foreign_keys = ON");
  const db = new Kysely<Database>({
    dialect: new SqliteDialect({ database: cachingStatements(sqlite) }),
    log: statementLog(options),
  });
  let fresh = false;
  if (options.migrate !== false) fresh = (await migrate(db)).includes(FIRST_MIGRATION);
  await options.bootstrap?.(db, { shared: false });
  let checkpointer: Checkpointer | undefined;
  if (options.checkpoints === "background") {
    const automatic = neverCollected(sqlite.prepare("PRAGMA wal_autocheckpoint")).pluck().get();
    checkpointer = startCheckpointer(path, {
      onLost(error) {
        if (sqlite.open) sqlite.exec(`PRAGMA wal_autocheckpoint = ${Number(automatic)}`);
        options.onCheckpointerLost?.(error);
      },
      onBack() {
        if (sqlite.open) sqlite.exec("PRAGMA wal_autocheckpoint = 0");
        options.onCheckpointerBack?.();
      },
    });
    sqlite.exec("PRAGMA wal_autocheckpoint = 0");
  }
  if (options.checkpoints === "elsewhere") sqlite.exec("PRAGMA wal_autocheckpoint = 0");
  const local = localNotifier(path, { onError: options.onError });
  const notifier = options.relay ? relayedNotifier(local, { db, port: options.relay }) : local;
  return {
    db,
    engine: "sqlite",
    shared: false,
    path,
    clock: systemClock(options.localNow),
    notifier,
    fresh,
    async close() {
      await notifier.close();
      await checkpointer?.stop();
      await db.destroy();
    },
  };
}

const FIRST_MIGRATION = Object.keys(MIGRATIONS)[0];

async function openPostgresStore(url: string, options: OpenStoreOptions): Promise<Store> {
  const pool = createPostgresPool(url, {
    poolSize: options.poolSize ?? 10,
    preparedStatements: options.preparedStatements ?? false,
    idleInTransactionTimeoutMs: options.idleInTransactionTimeoutMs ?? 60_000,
    statementTimeoutMs: options.statementTimeoutMs ?? 30_000,
    onError: options.onError,
  });
  const db = new Kysely<Database>({ dialect: postgresDialect(pool), log: statementLog(options) });
  try {
    let fresh = false;
    if (options.migrate !== false || options.bootstrap) {
      await withMigrationLock(url, async () => {
        if (options.migrate !== false) fresh = (await migrate(db)).includes(FIRST_MIGRATION);
        await options.bootstrap?.(db, { shared: true });
      });
    }
    const clock = await startDatabaseClock(() => readDatabaseMs(pool), {
      onError: options.onError,
      localNow: options.localNow,
    });
    const notifier = postgresNotifier(url, { db, onError: options.onError });
    return {
      db,
      engine: "postgres",
      shared: true,
      path: redactDatabaseUrl(url),
      clock,
      notifier,
      fresh,
      async close() {
        await notifier.close();
        clock.stop();
        await db.destroy();
      },
    };
  } catch (error) {
    await db.destroy();
    throw error;
  }
}

/**
 * Creates the database file 0600 before SQLite opens it (an empty file is an empty database), and
 * tightens an existing one and its WAL and shared-memory files: they hold inputs, results and sealed
 * secrets. SQLite gives the WAL and shared-memory files it creates the database file's mode.
 */
function makePrivate(path: string): void {
  try {
    closeSync(openSync(path, "wx", 0o600));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      if (existsSync(file)) chmodSync(file, 0o600);
    } catch (error) {
      // Another user's store (a CLI reading it): theirs to tighten.
      if ((error as NodeJS.ErrnoException).code !== "EPERM") throw error;
    }
  }
}

const STATEMENT_CACHE_LIMIT = 500;

const RETAINED_STATEMENTS: BetterSqlite3.Statement[] = [];

/**
 * Keeps `statement` reachable until the process ends. better-sqlite3 12 on Node 24 aborts the process
 * (`RemoveEnvironmentCleanupHook`: "Assertion failed: (env) != nullptr") when a garbage collection inside
 * a microtask destroys a collected `Statement`; a statement never collected never gets there. The cost is
 * a small object per distinct SQL text (closing a database finalizes its statements in SQLite).
 * better-sqlite3 13 (Node-API) has no such bug but needs Node 22+.
 */
function neverCollected<S extends BetterSqlite3.Statement>(statement: S): S {
  RETAINED_STATEMENTS.push(statement);
  return statement;
}

/**
 * Kysely prepares every statement anew; compiling SQL is a large share of a small query's cost, so
 * prepared statements are reused by their SQL text (bounded; parameters are bound per call).
 */
function cachingStatements(sqlite: BetterSqlite3.Database): SqliteDatabase {
  const cache = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sql) {
      let statement = cache.get(sql);
      if (!statement) {
        statement = neverCollected(sqlite.prepare(sql));
        if (cache.size >= STATEMENT_CACHE_LIMIT) cache.delete(cache.keys().next().value as string);
        cache.set(sql, statement);
      }
      return statement as unknown as ReturnType<SqliteDatabase["prepare"]>;
    },
  };
}

/**
 * Applies pending migrations; resolves with the names of those applied, throws with the failing
 * migration's name and error. On PostgreSQL, processes starting at once must call it under one lock
 * (as `openStore` does).
 */
export async function migrate(db: Kysely<Database>): Promise<string[]> {
  const provider: MigrationProvider = { getMigrations: () => Promise.resolve(MIGRATIONS) };
  const migrator = new Migrator({ db, provider, migrationTableName: "runplane_migrations" });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "unknown";
    throw new Error(`Store migration ${failed} failed: ${(error as Error).message ?? error}`, { cause: error });
  }
  return (results ?? []).filter((r) => r.status === "Success").map((r) => r.migrationName);
}

/** Whether every known migration has been applied. */
export async function migrationsApplied(db: Kysely<Database>): Promise<boolean> {
  const provider: MigrationProvider = { getMigrations: () => Promise.resolve(MIGRATIONS) };
  const migrator = new Migrator({ db, provider, migrationTableName: "runplane_migrations" });
  const all = await migrator.getMigrations();
  return all.every((m) => m.executedAt !== undefined);
}

/** Creates the project if it does not exist yet. */
export async function ensureProject(db: Kysely<Database>, projectId: string): Promise<void> {
  await db
    .insertInto("projects")
    .values({ id: projectId, created_at: Date.now() })
    .onConflict((oc) => oc.column("id").doNothing())
    .execute();
}

/** Something queries run on: the database or a transaction. */
export type Queryable = Kysely<Database> | Transaction<Database>;

/**
 * A statement written once as SQL text with `?` placeholders, for the few statements on a per-request
 * path: building and compiling a Kysely query costs more than SQLite takes to run a small one. Keep
 * the SQL portable (standard SQL that PostgreSQL accepts too); on PostgreSQL the placeholders become
 * `$1`, `$2`, … (translated once, here). Where the engines must differ, give both texts (see
 * `DialectStatement`).
 */
export function rawStatement<Row = unknown>(
  sqlText: string | DialectStatement,
): (db: Queryable, parameters: readonly unknown[]) => Promise<QueryResult<Row>> {
  const compile: (parameters: readonly unknown[]) => CompiledQuery = typeof sqlText === "string"
    ? portableQuery(sqlText)
    : portableQuery(sqlText.sqlite, { postgresSql: sqlText.postgres, postgresParameters: sqlText.postgresParameters });
  return (db, parameters) => db.executeQuery<Row>(compile(parameters));
}

/**
 * One statement written twice, for where the engines differ (a claim with `FOR UPDATE SKIP LOCKED` on
 * PostgreSQL, a conditional update under SQLite's single writer): each engine runs its own text with
 * the same parameters. Keep both next to each other and test both.
 */
export interface DialectStatement {
  /** SQLite's text, with `?` placeholders in the order of the parameters. */
  sqlite: string;
  /**
   * PostgreSQL's text, with `$1`, `$2`, … naming the same parameters by position (so its clauses may
   * come in another order). It must name every parameter: PostgreSQL refuses one it cannot type.
   */
  postgres: string;
  /**
   * How PostgreSQL's text takes the parameters, when it needs them in another shape (a batch insert
   * that takes one array per column instead of a parameter per value).
   */
  postgresParameters?: (parameters: readonly unknown[]) => unknown[];
}

/**
 * A statement's column list, quoted (and qualified by `table` when given), from a record naming every
 * column: `satisfies Record<keyof SomeTable, true>` makes a column added to the table a compile error
 * until it is listed. Use it for `returning` instead of `*`: a prepared statement's result may not
 * change shape, so a column that a newer process's migration adds during a rolling upgrade must not
 * reach this version's statements.
 */
export function columnList(columns: Record<string, true>, table?: string): string {
  const prefix = table === undefined ? "" : `"${table}".`;
  return Object.keys(columns).map((column) => `${prefix}"${column}"`).join(", ");
}

/** Whether `error` is the store refusing a row for a missing referenced row (a foreign key), on either engine. */
export function isForeignKeyViolation(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | null;
  // SQLite: SQLITE_CONSTRAINT_FOREIGNKEY; PostgreSQL: SQLSTATE 23503 foreign_key_violation.
  return e?.code === "SQLITE_CONSTRAINT_FOREIGNKEY" || e?.code === "23503";
}

/** Whether `error` is the store refusing a row that breaks a unique constraint or index, on either engine. */
export function isUniqueViolation(error: unknown): boolean {
  const e = error as { code?: unknown } | null;
  // SQLite: SQLITE_CONSTRAINT_UNIQUE (or _PRIMARYKEY); PostgreSQL: SQLSTATE 23505 unique_violation.
  return e?.code === "SQLITE_CONSTRAINT_UNIQUE" || e?.code === "SQLITE_CONSTRAINT_PRIMARYKEY" || e?.code === "23505";
}

const writeProbeStatement = rawStatement(
  `insert into store_probes (owner, written_at) values (?, ?)
   on conflict (owner) do update set written_at = excluded.written_at`,
);

/** Writes `owner`'s probe row: resolves when the store took a write (see `outage.ts`). */
export async function writeProbe(db: Queryable, owner: string, now: number): Promise<void> {
  await writeProbeStatement(db, [owner, now]);
}
