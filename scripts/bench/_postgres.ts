/**
 * PostgreSQL for the benchmark: the server named by `BENCH_DATABASE_URL` (else
 * `RUNPLANE_TEST_DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/postgres`), on which each
 * scenario run creates a fresh database and drops it after. When no server answers, the PostgreSQL rows
 * say so instead of failing the run.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

/** The server's maintenance URL: only used to create and drop the benchmark's databases. */
export const BENCH_DATABASE_URL = process.env.BENCH_DATABASE_URL ?? process.env.RUNPLANE_TEST_DATABASE_URL
  ?? "postgres://postgres@127.0.0.1:5432/postgres";

/** The master key every PostgreSQL server of this benchmark run is given (processes sharing a database share it). */
export const BENCH_MASTER_KEY = randomBytes(32).toString("base64");

function redacted(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = "***";
  return parsed.toString();
}

let probe: Promise<string | null> | undefined;

/** Null when PostgreSQL answers; else why not, as a note for the rows it leaves out (asked once per run). */
export function postgresUnavailable(): Promise<string | null> {
  probe ??= (async () => {
    const client = new pg.Client({ connectionString: BENCH_DATABASE_URL, connectionTimeoutMillis: 3000 });
    try {
      await client.connect();
      await client.query("select 1");
      return null;
    } catch (error) {
      return `skipped: no PostgreSQL answers at ${redacted(BENCH_DATABASE_URL)} (${
        (error as Error).message || String(error)
      }); start one or set BENCH_DATABASE_URL`;
    } finally {
      await client.end().catch(() => {});
    }
  })();
  return probe;
}

async function onServer<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: BENCH_DATABASE_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** A database made for one scenario run. */
export interface BenchDatabase {
  url: string;
  /** Runs one query on it (a short-lived connection). */
  query<T extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<T[]>;
  /** Ends its sessions and drops it. */
  drop(): Promise<void>;
}

/** Creates an empty database with a random name. */
export async function createBenchDatabase(): Promise<BenchDatabase> {
  const name = `runplane_bench_${randomBytes(6).toString("hex")}`;
  await onServer((client) => client.query(`create database "${name}"`));
  const url = new URL(BENCH_DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async query<T extends pg.QueryResultRow>(text: string, values: unknown[] = []) {
      const client = new pg.Client({ connectionString: url.toString() });
      await client.connect();
      try {
        return (await client.query<T>(text, values)).rows;
      } finally {
        await client.end();
      }
    },
    // `with (force)` ends the sessions still connected (a server that did not stop in time).
    drop: () => onServer((client) => client.query(`drop database if exists "${name}" with (force)`)).then(() => {}),
  };
}
