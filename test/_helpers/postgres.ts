/**
 * PostgreSQL for tests: the server named by `RUNPLANE_TEST_DATABASE_URL` (default
 * `postgres://postgres@127.0.0.1:5432/test`), a fresh database per test file (or per caller) dropped
 * after. When no server answers, the PostgreSQL variants are skipped with a loud message, unless
 * `RUNPLANE_TEST_REQUIRE_POSTGRES=1` (as in `.ci/run`), which makes them fail instead.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { openStore, type OpenStoreOptions, type Store, type StoreEngine } from "../../server/store/mod.ts";

/**
 * The master key (`RUNPLANE_MASTER_KEY`) the test servers and CLI runs of this test process give a
 * PostgreSQL store unless told otherwise: one per process, so servers sharing a database share it.
 */
export const TEST_MASTER_KEY = randomBytes(32).toString("base64");

/** The server tests use; its database is only used to create and drop the test databases. */
export const TEST_DATABASE_URL = process.env.RUNPLANE_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_POSTGRES === "1";

async function answers(): Promise<string | null> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("select 1");
    return null;
  } catch (error) {
    return (error as Error).message || String(error);
  } finally {
    await client.end().catch(() => {});
  }
}

let probed: Promise<StoreEngine[]> | undefined;

/**
 * The engines to run store-dependent tests on: SQLite always, PostgreSQL when its server answers.
 * Otherwise says loudly on stderr that the PostgreSQL tests were skipped and how to enable them — or,
 * with `RUNPLANE_TEST_REQUIRE_POSTGRES=1`, throws.
 */
export function engines(): Promise<StoreEngine[]> {
  probed ??= answers().then((problem) => {
    if (problem === null) return ["sqlite", "postgres"];
    const message = `PostgreSQL at ${TEST_DATABASE_URL} does not answer (${problem})`;
    if (REQUIRED) throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_POSTGRES=1 requires it`);
    console.error(
      `\n*** SKIPPED the PostgreSQL variants of these tests: ${message}.\n`
        + `*** Start PostgreSQL 15 on 127.0.0.1:5432 (trust auth, user postgres, database test), or point\n`
        + `*** RUNPLANE_TEST_DATABASE_URL at a server where that user may create databases; set\n`
        + `*** RUNPLANE_TEST_REQUIRE_POSTGRES=1 to fail instead of skipping.\n`,
    );
    return ["sqlite"];
  });
  return probed;
}

/** A database made for a test. */
export interface TestDatabase {
  /** Its URL. */
  url: string;
  /** Ends its connections and drops it. */
  drop(): Promise<void>;
}

async function onServer<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Creates an empty database with a random name on the test server. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `runplane_test_${randomBytes(6).toString("hex")}`;
  await onServer((client) => client.query(`create database "${name}"`));
  const url = new URL(TEST_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    // `with (force)` ends the sessions still connected first (a crashed test's pool, a listener).
    drop: () => onServer((client) => client.query(`drop database if exists "${name}" with (force)`)).then(() => {}),
  };
}

/** A store opened for a test on one engine, in a temporary data dir (and database). */
export interface TestStore {
  store: Store;
  dataDir: string;
  /** The PostgreSQL database's URL, or null on SQLite. */
  databaseUrl: string | null;
  /** Closes the store and removes its data dir and database. */
  close(): Promise<void>;
}

/** Opens a store on `engine`: a fresh data dir, and on PostgreSQL a fresh database. */
export async function openTestStore(engine: StoreEngine, options: OpenStoreOptions = {}): Promise<TestStore> {
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-store-"));
  const database = engine === "postgres" ? await createTestDatabase() : null;
  const store = await openStore(dataDir, { ...options, databaseUrl: database?.url ?? null });
  return {
    store,
    dataDir,
    databaseUrl: database?.url ?? null,
    async close() {
      await store.close();
      await database?.drop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
