import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createServiceAccount, loadOrCreateSigningKey } from "../../server/auth/mod.ts";
import { openStore } from "../../server/store/mod.ts";
import { ROOT } from "../generate.ts";
import { type BenchProcess, startProcess } from "./_processes.ts";

/** The benchmark's project (its apps are in scripts/bench/apps/p-bench). */
export const BENCH_PROJECT = "p-bench";

/** A Runplane server process for the benchmark, with a token. */
export interface BenchServer extends BenchProcess {
  token: string;
  dataDir: string;
}

/**
 * Starts the built server (`dist/server/main.js`) as its own process, in production mode (no response
 * check), on a temporary data dir with the benchmark apps, and mints a token for `p-bench`.
 */
export async function startRunplane(env: Record<string, string> = {}): Promise<BenchServer> {
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-bench-"));
  const store = await openStore(dataDir);
  const key = await loadOrCreateSigningKey(dataDir);
  const { token } = await createServiceAccount({ db: store.db, key }, {
    projectId: BENCH_PROJECT,
    name: "bench",
    scopes: ["rest", "run"],
    expiresAt: Date.now() + 86_400_000,
  });
  await store.close();
  const server = await startProcess(process.execPath, {
    // The built server, as production runs it (`npm run build` first; mod.ts does).
    args: [join(ROOT, "dist", "server", "main.js")],
    cwd: ROOT,
    env: {
      NODE_ENV: "production",
      RUNPLANE_DATA_DIR: dataDir,
      RUNPLANE_APPS_DIR: join(ROOT, "scripts", "bench", "apps"),
      RUNPLANE_LOG_LEVEL: "warn",
      ...env,
    },
    readyPath: "/healthz",
  });
  return {
    ...server,
    token,
    dataDir,
    async stop() {
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
