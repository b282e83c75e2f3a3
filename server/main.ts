/** `npm start` / `runplane serve`: validated settings, a demo project on a fresh data dir, and a clean stop. */
import { createServiceAccount } from "./auth/mod.ts";
import { ConfigError, loadConfig, type SettingOverrides, settingProblem } from "./config.ts";
import { DataDirError } from "./data_dir.ts";
import { createServer, type RunplaneServer } from "./mod.ts";
import { applyServerV8Flags } from "./node_flags.ts";
import { skewProcessClock } from "./store/mod.ts";

/** The project `npm start` creates on a fresh data dir. */
export const DEMO_PROJECT = "p-demo";

/** Starts the server with `overrides` (flag values) over the environment; resolves once listening. */
export async function serve(overrides: SettingOverrides = {}): Promise<void> {
  applyServerV8Flags();
  let server: RunplaneServer;
  try {
    const config = loadConfig(process.env, overrides);
    // Test only (0 otherwise): this process then keeps time as a host whose clock is off.
    skewProcessClock(config.testClockOffsetMs);
    server = await createServer(config);
  } catch (error) {
    // An unwritable data dir is found at start, not while reading settings, and reported as a bad setting.
    const problem = error instanceof DataDirError
      ? new ConfigError([settingProblem("dataDir", error.message, { env: process.env, overrides })])
      : error;
    if (problem instanceof ConfigError) {
      process.stderr.write(`runplane: ${problem.message}\n`);
      process.exit(2);
    }
    throw error;
  }
  const config = server.context.config;
  let url: string;
  try {
    url = await server.listen();
  } catch (error) {
    process.stderr.write(`runplane: cannot listen on ${config.host}:${config.port}: ${(error as Error).message}\n`);
    await server.close();
    process.exit(1);
  }
  if (server.freshDataDir) {
    const { token } = await createServiceAccount(
      { db: server.context.store.db, key: server.context.key },
      {
        projectId: DEMO_PROJECT,
        name: "demo",
        scopes: ["admin", "deploy", "rest", "run"],
        expiresAt: Date.now() + 30 * 86_400_000,
      },
    );
    process.stdout.write(
      [
        "",
        `Runplane is serving ${config.appsDir} at ${url}`,
        `Fresh data dir ${config.dataDir}: created project ${DEMO_PROJECT} and a 30-day demo token:`,
        "",
        `  export RUNPLANE_TOKEN=${token}`,
        "",
        "Try it:",
        "",
        `  curl -s -X POST ${url}/v4/${DEMO_PROJECT}/hello/run -H "Authorization: Bearer $RUNPLANE_TOKEN" -H 'Content-Type: application/json' -d '{"name":"world"}'`,
        "",
        `Then open ${url}/dashboard and paste the token to see the run.`,
        "",
        "",
      ].join("\n"),
    );
  }
  // The first SIGINT or SIGTERM drains; a second one (Ctrl-C again) cuts the drain short: what still
  // runs is recorded as on the drain timeout, the replicas stop and the process exits.
  let stopping = false;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      if (stopping) {
        void server.drain();
        return;
      }
      stopping = true;
      server.drain().then(() => process.exit(0), (error) => {
        process.stderr.write(`runplane: stopping failed: ${(error as Error).stack}\n`);
        process.exit(1);
      });
    });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  await serve();
}
