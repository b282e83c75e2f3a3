/**
 * A PostgreSQL cluster of a test's own, for chaos tests that restart, stop or starve the server (the
 * shared test server must not be touched: other test files use it at the same time). It is made with the
 * machine's PostgreSQL binaries (`initdb`, `pg_ctl` under /usr/lib/postgresql/<version>/bin, Debian's
 * layout) in a temporary folder, on a free port, trust auth on loopback. PostgreSQL refuses to run as
 * root, so as root the cluster belongs to the `postgres` user (`runuser`).
 *
 * When the binaries are missing the tests skip loudly, unless `RUNPLANE_TEST_REQUIRE_POSTGRES=1` (as in
 * `.ci/run`), which makes them fail instead.
 */
import { execFile } from "node:child_process";
import { chmod, chown, mkdtemp, readdir, rm } from "node:fs/promises";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import pg from "pg";

const run = promisify(execFile);

const REQUIRED = process.env.RUNPLANE_TEST_REQUIRE_POSTGRES === "1";

/** A running cluster of the test's own. */
export interface OwnPostgres {
  /** The URL of its `runplane` database (user postgres). */
  url: string;
  port: number;
  /** Stops it (fast: sessions are ended with 57P01) and starts it again. */
  restart(): Promise<void>;
  /** Stops it (fast shutdown). */
  stop(): Promise<void>;
  /** Starts it after `stop`. */
  start(): Promise<void>;
  /** Restarts it with `max_connections` set to `count` (command-line settings win over ALTER SYSTEM). */
  restartWithMaxConnections(count: number): Promise<void>;
  /** Ends every session of the `runplane` database (pg_terminate_backend: 57P01 to each). */
  terminateBackends(): Promise<number>;
  /** Runs `sql` on its `postgres` database. */
  query(sql: string): Promise<pg.QueryResult>;
  /** Stops it and removes its folder. */
  remove(): Promise<void>;
}

/** The bin folder of the newest PostgreSQL installed, or a reason there is none. */
async function binaries(): Promise<string | { missing: string }> {
  const root = "/usr/lib/postgresql";
  try {
    const versions = (await readdir(root)).sort((a, b) => Number(a) - Number(b));
    for (const version of versions.reverse()) {
      const bin = join(root, version, "bin");
      if (existsSync(join(bin, "initdb")) && existsSync(join(bin, "pg_ctl"))) return bin;
    }
  } catch {
    // Not installed.
  }
  return { missing: `no PostgreSQL binaries (initdb, pg_ctl) under ${root}` };
}

/**
 * Whether chaos tests can make their own cluster: a reason to skip (said loudly on stderr), or null.
 * With `RUNPLANE_TEST_REQUIRE_POSTGRES=1` a missing part throws instead.
 */
export async function ownPostgresMissing(): Promise<string | null> {
  const found = await binaries();
  if (typeof found === "string") return null;
  const message = `cannot make a PostgreSQL cluster of the test's own: ${found.missing}`;
  if (REQUIRED) throw new Error(`${message}, and RUNPLANE_TEST_REQUIRE_POSTGRES=1 requires it`);
  console.error(`\n*** SKIPPED the PostgreSQL chaos tests: ${message}.\n*** Install Debian's postgresql package.\n`);
  return message;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Options of `startOwnPostgres`. */
export interface OwnPostgresOptions {
  /** `max_connections` (default 100). */
  maxConnections?: number;
}

/** Makes, starts and returns a cluster of the test's own. */
export async function startOwnPostgres(options: OwnPostgresOptions = {}): Promise<OwnPostgres> {
  const bin = await binaries();
  if (typeof bin !== "string") throw new Error(bin.missing);
  const root = await mkdtemp(join(tmpdir(), "runplane-pg-"));
  const dataDir = join(root, "data");
  const asRoot = userInfo().uid === 0;
  if (asRoot) {
    const { stdout } = await run("id", ["-u", "postgres"]);
    const { stdout: gid } = await run("id", ["-g", "postgres"]);
    await chown(root, Number(stdout.trim()), Number(gid.trim()));
  }
  await chmod(root, 0o700);
  const as = (command: string, args: string[]) =>
    asRoot ? run("runuser", ["-u", "postgres", "--", join(bin, command), ...args]) : run(join(bin, command), args);
  await as("initdb", ["-D", dataDir, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]);
  const port = await freePort();
  let maxConnections = options.maxConnections ?? 100;
  const settings = () =>
    [
      `-p ${port}`,
      "-c listen_addresses=127.0.0.1",
      `-c unix_socket_directories=${root}`,
      `-c max_connections=${maxConnections}`,
      "-c fsync=off",
      "-c shared_buffers=16MB",
    ].join(" ");
  const log = join(root, "server.log");
  const start = () => as("pg_ctl", ["-D", dataDir, "-l", log, "-o", settings(), "-w", "-t", "60", "start"]);
  const stop = () => as("pg_ctl", ["-D", dataDir, "-m", "fast", "-w", "-t", "60", "stop"]);
  await start();
  const base = `postgres://postgres@127.0.0.1:${port}`;
  async function query(sql: string): Promise<pg.QueryResult> {
    const client = new pg.Client({ connectionString: `${base}/postgres` });
    await client.connect();
    try {
      return await client.query(sql);
    } finally {
      await client.end();
    }
  }
  await query("create database runplane");
  let running = true;
  return {
    url: `${base}/runplane`,
    port,
    async restart() {
      await stop();
      await start();
    },
    async restartWithMaxConnections(count) {
      await stop();
      maxConnections = count;
      await start();
    },
    async stop() {
      await stop();
      running = false;
    },
    async start() {
      await start();
      running = true;
    },
    async terminateBackends() {
      const { rows } = await query(
        "select pg_terminate_backend(pid) as ended from pg_stat_activity where datname = 'runplane' and pid <> pg_backend_pid()",
      );
      return rows.filter((row) => row.ended).length;
    },
    query,
    async remove() {
      if (running) await stop().catch(() => {});
      await rm(root, { recursive: true, force: true });
    },
  };
}
