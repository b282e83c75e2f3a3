/**
 * Starts a real server for a test: a temporary data dir, a free loopback port, a log captured in
 * memory, and a service-account token for project `p-test`.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { createServiceAccount, type Scope } from "../../server/auth/mod.ts";
import { type Config, loadConfig } from "../../server/config.ts";
import { createLogger } from "../../server/log.ts";
import { createServer, type RunplaneServer } from "../../server/mod.ts";
import { readTestHooks } from "../../server/test_hooks/mod.ts";
import type { StoreEngine } from "../../server/store/mod.ts";
import { createTestClient, type TestClient } from "./client.ts";
import { createTestDatabase, TEST_MASTER_KEY } from "./postgres.ts";
import { testServerSandbox } from "./sandbox.ts";

/** The project every test server's default token belongs to. */
export const TEST_PROJECT = "p-test";

/** A started test server. */
export interface TestServer {
  url: string;
  dataDir: string;
  /** The PostgreSQL database the store is in, or null for the data dir's SQLite file. */
  databaseUrl: string | null;
  server: RunplaneServer;
  /** A `rest run` token for `p-test`, valid for a day. */
  token: string;
  /** The validating client, authenticated with `token`. */
  client: TestClient;
  /** Every log line so far, parsed. */
  logs: Array<Record<string, unknown>>;
  /** The requests it answered (but assets) and the warnings it logged since `sinceMs`, for a failure to tell. */
  recentLogs(sinceMs: number): string;
  /** Every log line so far, as written. */
  rawLogs(): string;
  /** Mints another token. */
  mintToken(
    options?: { projectId?: string; scopes?: Scope[]; expiresAt?: number },
  ): Promise<{ token: string; id: string }>;
  close(): Promise<void>;
}

/** Options of `startTestServer`. */
export interface TestServerOptions {
  /** Environment variables over the defaults (`PORT=0`, a temporary `RUNPLANE_DATA_DIR`, …). */
  env?: Record<string, string>;
  /** Keep this data dir (e.g. to restart on it) instead of making a new one. */
  dataDir?: string;
  /**
   * The store's engine: `postgres` puts the store in a fresh PostgreSQL database (dropped at `close`)
   * unless `databaseUrl` names one to use (and keep). Default `sqlite`.
   */
  engine?: StoreEngine;
  /**
   * A PostgreSQL database to use (e.g. to restart on it, or to share it between servers). The store's
   * master key is `TEST_MASTER_KEY` unless `env` gives `RUNPLANE_MASTER_KEY`.
   */
  databaseUrl?: string;
  /** Where the server looks for GPU device nodes and the driver's GPU folders (fake ones: `test/_helpers/gpus.ts`). */
  gpuPaths?: { devices?: string; driver?: string; libraries?: string };
}

/** Starts a server on 127.0.0.1 with a free port; close it in `after`. */
export async function startTestServer(options: TestServerOptions = {}): Promise<TestServer> {
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), "runplane-test-")));
  const database = options.engine === "postgres" && !options.databaseUrl ? await createTestDatabase() : null;
  const databaseUrl = options.databaseUrl ?? database?.url;
  const config: Config = loadConfig({
    PORT: "0",
    HOST: "127.0.0.1",
    RUNPLANE_DATA_DIR: dataDir,
    RUNPLANE_APPS_DIR: join(dataDir, "apps"),
    RUNPLANE_LOG_LEVEL: "debug",
    RUNPLANE_RESPONSE_CHECK: "1",
    // The host budget of a test machine (two cores) would hold tests that start several replicas to a couple
    // at a time; the tests of that budget set their own.
    RUNPLANE_HOST_CPU: "256",
    RUNPLANE_HOST_MEMORY: "1024gb",
    RUNPLANE_SANDBOX: await testServerSandbox(),
    ...(databaseUrl ? { RUNPLANE_DATABASE_URL: databaseUrl, RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } : {}),
    ...options.env,
  });
  const lines: string[] = [];
  const logs: Array<Record<string, unknown>> = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split("\n")) {
        if (!line) continue;
        lines.push(line);
        logs.push(JSON.parse(line) as Record<string, unknown>);
      }
      done();
    },
  });
  const server = await createServer(config, {
    logger: createLogger({ level: config.logLevel, destination }),
    gpuPaths: options.gpuPaths,
    testHooks: readTestHooks(options.env ?? {}),
  });
  const url = await server.listen();
  async function mintToken(mint: { projectId?: string; scopes?: Scope[]; expiresAt?: number } = {}) {
    const { token, account } = await createServiceAccount(
      { db: server.context.store.db, key: server.context.key },
      {
        projectId: mint.projectId ?? TEST_PROJECT,
        name: "test",
        scopes: mint.scopes ?? ["rest", "run"],
        expiresAt: mint.expiresAt ?? Date.now() + 86_400_000,
      },
    );
    return { token, id: account.id };
  }
  const { token } = await mintToken();
  function recentLogs(sinceMs: number): string {
    const seen = logs.filter((line) =>
      Date.parse(String(line.time)) >= sinceMs
      && (Number(line.level) >= 40 || (line.msg === "request" && !String(line.path).startsWith("/dashboard/assets")))
    );
    return `the server's requests and warnings since then (${seen.length}):\n  `
      + seen.slice(-40).map((line) =>
        line.msg === "request"
          ? `${line.method} ${line.path} ${line.status} in ${line.duration_ms} ms${
            line.client_gone ? " (client gone)" : ""
          }`
          : `level ${line.level}: ${line.msg} ${JSON.stringify(line.err ?? "").slice(0, 200)}`
      ).join("\n  ");
  }
  return {
    url,
    dataDir,
    databaseUrl: databaseUrl ?? null,
    server,
    token,
    client: createTestClient(url, token),
    logs,
    rawLogs: () => lines.join("\n"),
    recentLogs,
    mintToken,
    async close() {
      await server.close();
      await database?.drop();
      if (!options.dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}
