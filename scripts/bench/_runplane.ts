import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServiceAccount } from "../../server/auth/mod.ts";
import { keysBootstrap, loadKeys, parseMasterKey } from "../../server/keys/mod.ts";
import { SERVER_NODE_FLAGS } from "../../server/node_flags.ts";
import { openStore, type Store } from "../../server/store/mod.ts";
import { ROOT } from "../_root.ts";
import { BENCH_MASTER_KEY, createBenchDatabase } from "./_postgres.ts";
import { type BenchProcess, startProcess } from "./_processes.ts";

/** The benchmark's project (its apps are in scripts/bench/apps/p-bench). */
export const BENCH_PROJECT = "p-bench";

/** A Runplane server process for the benchmark, with a token. */
export interface BenchServer extends BenchProcess {
  token: string;
  dataDir: string;
  /** Its PostgreSQL database, when it keeps its state there (else the SQLite file in `dataDir`). */
  databaseUrl?: string;
}

/** Options of `startRunplane`. */
export interface StartRunplaneOptions {
  /** A `postgres://` URL: the server keeps its state there (with `BENCH_MASTER_KEY`), not in SQLite. */
  databaseUrl?: string;
  /** The apps dir (default scripts/bench/apps). */
  appsDir?: string;
  /** A data dir to use, kept when the server stops (default: a new one, removed when it stops). */
  dataDir?: string;
  /** The token's scopes (default `rest` and `run`). */
  scopes?: Array<"run" | "rest" | "deploy" | "admin">;
  /** The port to listen on (default: a free one); for a server whose environment names its own address. */
  port?: number;
}

/**
 * Starts the built server (`dist/server/main.js`) as its own process, in production mode (no response
 * check), on a temporary data dir with the benchmark apps, and mints a token for `p-bench`.
 */
export async function startRunplane(
  env: Record<string, string> = {},
  options: StartRunplaneOptions = {},
): Promise<BenchServer> {
  const dataDir = options.dataDir ?? await mkdtemp(join(tmpdir(), "runplane-bench-"));
  const masterKey = options.databaseUrl ? parseMasterKey(BENCH_MASTER_KEY) : null;
  const store = await openStore(dataDir, { databaseUrl: options.databaseUrl, bootstrap: keysBootstrap(masterKey) });
  const key = (await loadKeys(store, { dataDir, masterKey })).signing.current;
  const { token } = await createServiceAccount({ db: store.db, key }, {
    projectId: BENCH_PROJECT,
    name: "bench",
    scopes: options.scopes ?? ["rest", "run"],
    expiresAt: Date.now() + 86_400_000,
  });
  await store.close();
  const server = await startProcess(process.execPath, {
    // The built server, as production runs it (`npm run build` first; mod.ts does).
    // `BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof"` profiles the servers a run starts;
    // `BENCH_DIST=<another build's dist>` runs that build (a baseline measured beside this one).
    args: [
      ...SERVER_NODE_FLAGS,
      ...(process.env.BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []),
      join(process.env.BENCH_DIST ?? join(ROOT, "dist"), "server", "main.js"),
    ],
    cwd: ROOT,
    env: {
      NODE_ENV: "production",
      RUNPLANE_DATA_DIR: dataDir,
      RUNPLANE_APPS_DIR: options.appsDir ?? join(ROOT, "scripts", "bench", "apps"),
      RUNPLANE_LOG_LEVEL: "warn",
      // The scenarios measure the server, not the host budget: a small machine's cores would make replicas
      // wait for each other.
      RUNPLANE_HOST_CPU: "256",
      RUNPLANE_HOST_MEMORY: "1024gb",
      // The cold-start scenario serves 100 apps of one project.
      RUNPLANE_PROJECT_REPLICA_LIMIT: "10000",
      // The scenarios measure one process unless they say otherwise (`auto` forks workers from 4 cores up).
      RUNPLANE_WORKERS: "1",
      ...(options.databaseUrl
        ? { RUNPLANE_DATABASE_URL: options.databaseUrl, RUNPLANE_MASTER_KEY: BENCH_MASTER_KEY }
        : {}),
      ...env,
    },
    readyPath: "/healthz",
    port: options.port,
  });
  return {
    ...server,
    token,
    dataDir,
    databaseUrl: options.databaseUrl,
    async stop() {
      await server.stop();
      if (!options.dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Starts a server like `startRunplane` on a fresh PostgreSQL database of its own, dropped when the
 * server is stopped.
 */
export async function startRunplaneOnPostgres(env: Record<string, string> = {}): Promise<BenchServer> {
  const database = await createBenchDatabase();
  try {
    const server = await startRunplane(env, { databaseUrl: database.url });
    return {
      ...server,
      async stop() {
        await server.stop();
        await database.drop();
      },
    };
  } catch (error) {
    await database.drop();
    throw error;
  }
}

/**
 * Opens the store a running bench server uses (its SQLite file or its PostgreSQL database) from the
 * benchmark's process, to fill it in bulk or read it; close it before stopping the server.
 */
export function openServerStore(server: BenchServer): Promise<Store> {
  return openStore(server.dataDir, { databaseUrl: server.databaseUrl, migrate: false });
}
