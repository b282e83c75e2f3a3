/** `npm start` / `runplane serve`: validated settings, a demo project on a fresh data dir, and a clean stop. */
import cluster from "node:cluster";
import { createServiceAccount } from "./auth/mod.ts";
import { type Config, ConfigError, loadConfig, type SettingOverrides, settingProblem } from "./config.ts";
import { DataDirError } from "./data_dir.ts";
import { deploymentsRefused } from "./deployment_gate.ts";
import { isWorkerDrain, serveAsWorker, startSupervisor } from "./host/mod.ts";
import { createLogger } from "./log.ts";
import { createServer, type RunplaneServer } from "./mod.ts";
import { applyServerV8Flags } from "./node_flags.ts";
import { skewProcessClock } from "./store/mod.ts";

/** The project `npm start` creates on a fresh data dir. */
export const DEMO_PROJECT = "p-demo";

/** What a signal stops: a lone server, a worker, or a supervisor with its workers. */
interface Stoppable {
  /** Drains and stops; called again while draining, cuts the drain short. */
  drain(): Promise<void>;
}

/** Starts the server with `overrides` (flag values) over the environment; resolves once listening. */
export async function serve(overrides: SettingOverrides = {}): Promise<void> {
  applyServerV8Flags();
  let started: { server: RunplaneServer; url: string; stoppable: Stoppable };
  try {
    const config = loadConfig(process.env, overrides);
    // Test only (0 otherwise): this process then keeps time as a host whose clock is off.
    skewProcessClock(config.testClockOffsetMs);
    started = await start(config);
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
  const stop = stopOnSignals(started.stoppable);
  if (cluster.isWorker) {
    // The supervisor's word to drain: as SIGTERM, unless a signal (Ctrl-C reaches every process of the
    // group) began the drain already; a second word cuts it short.
    let words = 0;
    process.on("message", (message) => {
      if (isWorkerDrain(message) && !(++words === 1 && stop.stopping)) stop.request();
    });
    return;
  }
  printUnjailedNotice(started.server);
  if (started.server.freshDataDir) await printWelcome(started.server, started.url);
}

/** Starts this process's part: the lone server, the supervisor and its workers, or (a cluster child) a worker. */
async function start(config: Config): Promise<{ server: RunplaneServer; url: string; stoppable: Stoppable }> {
  if (config.workers > 1 && cluster.isWorker) {
    const { server, url } = await serveAsWorker(config);
    // The supervisor is gone (killed): nothing here can run a call any more.
    process.on("disconnect", () => {
      void server.drain(0).finally(() => process.exit(1));
    });
    return { server, url, stoppable: { drain: () => server.drain() } };
  }
  if (config.workers > 1) {
    const supervisor = await startSupervisor(config, { logger: createLogger({ level: config.logLevel }) });
    return { server: supervisor.server, url: supervisor.url, stoppable: supervisor };
  }
  const server = await createServer(config);
  let url: string;
  try {
    url = await server.listen();
  } catch (error) {
    process.stderr.write(`runplane: cannot listen on ${config.host}:${config.port}: ${(error as Error).message}\n`);
    await server.close();
    process.exit(1);
  }
  return { server, url, stoppable: { drain: () => server.drain() } };
}

/**
 * The first SIGINT or SIGTERM drains; a second one (Ctrl-C again) cuts the drain short: what still runs
 * is recorded as on the drain timeout, the replicas stop and the process exits. Returns the same
 * request, for other words to stop (a worker's supervisor).
 */
function stopOnSignals(target: Stoppable): { request(): void; readonly stopping: boolean } {
  let stopping = false;
  function request(): void {
    if (stopping) {
      void target.drain();
      return;
    }
    stopping = true;
    target.drain().then(() => process.exit(0), (error) => {
      process.stderr.write(`runplane: stopping failed: ${(error as Error).stack}\n`);
      process.exit(1);
    });
  }
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, request);
  return {
    request,
    get stopping() {
      return stopping;
    },
  };
}

/**
 * At every start without a jail under `auto`: that tenants' code would run unjailed, so deployments are
 * refused, and what to install. Printed before the welcome, framed, so a newcomer sees it first.
 */
function printUnjailedNotice(server: RunplaneServer): void {
  const { sandbox, config } = server.context;
  if (!deploymentsRefused(sandbox)) return;
  const rule = "!".repeat(100);
  process.stdout.write(
    [
      "",
      rule,
      "!! NO SANDBOX: tenants' code would run UNJAILED on this host, as the server's user, able to read its keys.",
      "!! So deployments are REFUSED (503 sandbox-unavailable), and deployments in the store are not built or served.",
      `!! The apps folder ${config.appsDir} is served as usual: its code is yours.`,
      "!! What is missing:",
      ...sandbox.problems.map((problem) => `!!   - ${problem}`),
      "!! Install it (apt-get install bubblewrap slirp4netns python3-seccomp) and restart, or set",
      "!! RUNPLANE_SANDBOX=off to accept unjailed deployments knowingly.",
      rule,
      "",
      "",
    ].join("\n"),
  );
}

/** On a fresh data dir: the demo project's token, and how to call the demo app. */
async function printWelcome(server: RunplaneServer, url: string): Promise<void> {
  const config = server.context.config;
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

if (import.meta.url === `file://${process.argv[1]}`) {
  await serve();
}
