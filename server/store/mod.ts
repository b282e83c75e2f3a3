/**
 * The store: one Kysely layer over SQLite (better-sqlite3, WAL) in the data dir. Queries are written
 * with Kysely's portable builders so a PostgreSQL dialect can be added without rewriting them.
 */
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import {
  CompiledQuery,
  Kysely,
  type MigrationProvider,
  Migrator,
  type QueryResult,
  type SqliteDatabase,
  SqliteDialect,
  type Transaction,
} from "kysely";
import { type Checkpointer, startCheckpointer } from "./checkpointer.ts";
import { MIGRATIONS } from "./_migrations/mod.ts";
import type { Database } from "./schema.ts";

export { createGroupCommit, type GroupCommit, type GroupCommitOptions } from "./group_commit.ts";
export type { Database } from "./schema.ts";

/** An open store. */
export interface Store {
  db: Kysely<Database>;
  /** The SQLite file's path. */
  path: string;
  /** Closes the connection; pending statements finish first. */
  close(): Promise<void>;
}

/** Options of `openStore`. */
export interface OpenStoreOptions {
  /** Apply pending migrations (default true). */
  migrate?: boolean;
  /**
   * Where WAL checkpoints run: `commit` (SQLite's default: inside the commit that fills the WAL) or
   * `background` (a worker thread; for a server, whose event loop must not stall). Default `commit`.
   */
  checkpoints?: "commit" | "background";
  /** Called when the background checkpointer failed; checkpoints are then made in commits again. */
  onCheckpointerLost?(error: unknown): void;
}

/**
 * Opens (creating if needed) the store in `dataDir/runplane.sqlite3` and applies pending migrations.
 * Throws when a migration fails, naming it.
 */
export async function openStore(dataDir: string, options: OpenStoreOptions = {}): Promise<Store> {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = join(dataDir, "runplane.sqlite3");
  makePrivate(path);
  const sqlite = new BetterSqlite3(path);
  // `exec`, not `pragma`: no `Statement` object (see neverCollected).
  sqlite.exec("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000");
  sqlite.exec("PRAGMA foreign_keys = ON");
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: cachingStatements(sqlite) }) });
  if (options.migrate !== false) await migrate(db);
  let checkpointer: Checkpointer | undefined;
  if (options.checkpoints === "background") {
    const automatic = neverCollected(sqlite.prepare("PRAGMA wal_autocheckpoint")).pluck().get();
    checkpointer = startCheckpointer(path, {
      onLost(error) {
        if (sqlite.open) sqlite.exec(`PRAGMA wal_autocheckpoint = ${Number(automatic)}`);
        options.onCheckpointerLost?.(error);
      },
    });
    sqlite.exec("PRAGMA wal_autocheckpoint = 0");
  }
  return {
    db,
    path,
    async close() {
      await checkpointer?.stop();
      await db.destroy();
    },
  };
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

/** Applies pending migrations; throws with the failing migration's name and error. */
export async function migrate(db: Kysely<Database>): Promise<void> {
  const provider: MigrationProvider = { getMigrations: () => Promise.resolve(MIGRATIONS) };
  const migrator = new Migrator({ db, provider, migrationTableName: "runplane_migrations" });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error")?.migrationName ?? "unknown";
    throw new Error(`Store migration ${failed} failed: ${(error as Error).message ?? error}`, { cause: error });
  }
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
 * the SQL portable (standard SQL that PostgreSQL accepts too).
 */
export function rawStatement<Row = unknown>(
  sqlText: string,
): (db: Queryable, parameters: readonly unknown[]) => Promise<QueryResult<Row>> {
  return (db, parameters) => db.executeQuery<Row>(CompiledQuery.raw(sqlText, parameters as unknown[]));
}
