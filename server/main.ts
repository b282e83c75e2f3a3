/** `npm start` / `runplane serve`: validated settings, a demo project on a fresh data dir, and a clean stop. */
import cluster from "node:cluster";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { anyServiceAccount, createServiceAccount } from "./auth/mod.ts";
import { type Config, ConfigError, loadConfig, type SettingOverrides, settingProblem } from "./config.ts";
import { DataDirError } from "./data_dir.ts";
import { isWorkerDrain, serveAsWorker, startSupervisor } from "./host/mod.ts";
import { createLogger, type Logger } from "./log.ts";
import { createServer, type RunplaneServer } from "./mod.ts";
import { applyServerV8Flags } from "./node_flags.ts";
import { deploymentsRefused } from "./placement/mod.ts";
import { releaseStartGarbage } from "./start_garbage.ts";
import { readTestHooks, type TestHooks } from "./test_hooks/mod.ts";

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
    // Test only (none otherwise): a slow follower, a host clock that is off.
    const testHooks = readTestHooks(process.env);
    started = await start(config, testHooks);
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
  const stop = stopOnSignals(started.stoppable, { logger: started.server.context.logger });
  void started.server.appsLoaded.then(() => releaseStartGarbage({ logger: started.server.context.logger }));
  if (cluster.isWorker) {
    // The supervisor says "drain" once per drain, and again only to cut it short. Its first word begins
    // the drain unless this worker's own copy of the signal did (Ctrl-C reaches every process of the
    // group, in no set order), and never cuts it: the two are one stop.
    let words = 0;
    process.on("message", (message) => {
      if (!isWorkerDrain(message)) return;
      if (++words === 1) stop.begin();
      else stop.cutShort();
    });
    return;
  }
  printUnjailedNotice(started.server);
  warnOfMissingAppsDir(started.server.context.config);
  if (await welcomeDue(started.server)) await printWelcome(started.server, started.url);
  else printTokenHint(started.server, started.url);
}

/**
 * Whether this start shows the demo project's token: on a fresh data dir, and on one where no token was
 * ever minted (a first start that made the data dir but could not listen printed none). With a shared
 * store (PostgreSQL), only the start that created the schema does, so hosts starting together print one.
 */
async function welcomeDue(server: RunplaneServer): Promise<boolean> {
  if (server.freshDataDir) return true;
  const { store } = server.context;
  return !store.shared && !(await anyServiceAccount(store.db));
}

/** The command that mints a token for this server's store, as a newcomer would type it. */
export function tokenCreateCommand(config: Pick<Config, "dataDir" | "databaseUrl">): string {
  const store = config.databaseUrl
    ? "--database-url <url> (with RUNPLANE_MASTER_KEY set)"
    : `--data-dir ${shellWord(resolve(config.dataDir))}`;
  return `runplane token create ${store} --project ${DEMO_PROJECT}`;
}

function shellWord(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replaceAll("'", `'\\''`)}'`;
}

/** At a start without the welcome: where it serves, and how to get a token (one lost, or never seen). */
function printTokenHint(server: RunplaneServer, url: string): void {
  const config = server.context.config;
  process.stdout.write(
    [
      "",
      `Runplane is serving ${resolve(config.appsDir)} at ${url} (dashboard: ${url}/dashboard)`,
      `No token at hand? Mint one: ${tokenCreateCommand(config)}`,
      "",
      "",
    ].join("\n"),
  );
}

/**
 * A warning on stderr when the apps folder does not exist: it is relative to the working directory, so a
 * server started from another folder serves an empty one.
 */
function warnOfMissingAppsDir(config: Config): void {
  if (existsSync(config.appsDir)) return;
  process.stderr.write(
    `runplane: warning: the apps folder ${
      resolve(config.appsDir)
    } does not exist, so no app is served from it. It is relative to the working directory (${process.cwd()}): start the server from the folder that holds it, or set RUNPLANE_APPS_DIR (--apps-dir) to its absolute path.\n`,
  );
}

/** Starts this process's part: the lone server, the supervisor and its workers, or (a cluster child) a worker. */
async function start(
  config: Config,
  testHooks: TestHooks,
): Promise<{ server: RunplaneServer; url: string; stoppable: Stoppable }> {
  if (config.workers > 1 && cluster.isWorker) {
    const { server, url } = await serveAsWorker({
      createServer: (role) => createServer(config, { role, testHooks }),
      logger: createLogger({ level: config.logLevel }),
    });
    // The supervisor is gone (killed): nothing here can run a call any more. Node's cluster would exit this
    // process at once, its callers' connections cut without an answer; told the channel closed as asked
    // for, it leaves that to us: the calls in flight end `interrupted` (answered, and recorded so), then
    // the process exits.
    if (cluster.worker) cluster.worker.exitedAfterDisconnect = true;
    process.on("disconnect", () => {
      void server.drain(0).finally(() => process.exit(1));
    });
    return { server, url, stoppable: { drain: () => server.drain() } };
  }
  if (config.workers > 1) {
    const logger = createLogger({ level: config.logLevel });
    const supervisor = await startSupervisor({
      createServer: (role) => createServer(config, { logger, role, testHooks }),
      dataDir: config.dataDir,
      workers: config.workers,
      logger,
    });
    return { server: supervisor.server, url: supervisor.url, stoppable: supervisor };
  }
  const server = await createServer(config, { testHooks });
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
 * How long after the first stop signal another SIGINT or SIGTERM is taken as a copy of it, not as a
 * second request. One Ctrl-C reaches every process of the terminal's foreground group at once (npm, the
 * server, a supervisor's workers), and a parent that relays signals (npm, an init, systemd signalling the
 * whole control group) adds its own copy: they arrive within milliseconds, a few hundred when a loaded
 * machine is slow to run the relaying process. A person's deliberate second Ctrl-C comes after seeing the
 * first one take effect, later than that; one sooner is logged as taken for a copy, so pressing again
 * works.
 */
export const SIGNAL_COPY_WINDOW_MS = 1_000;

/** How a process's stop is asked for: by its signals, and (a worker) by its supervisor's words. */
interface StopRequests {
  /** Begins the drain, unless it began already. */
  begin(): void;
  /** Cuts the drain short (beginning it first if it had not begun). */
  cutShort(): void;
}

/**
 * The first SIGINT or SIGTERM drains; copies of it within `SIGNAL_COPY_WINDOW_MS` change nothing; one
 * after that (Ctrl-C again) cuts the drain short: what still runs is recorded as on the drain timeout,
 * the replicas stop and the process exits. Returns the requests, for other words to stop (a worker's
 * supervisor).
 */
function stopOnSignals(target: Stoppable, options: { logger: Logger }): StopRequests {
  let beganAt: number | undefined;
  function begin(): void {
    if (beganAt !== undefined) return;
    beganAt = performance.now();
    target.drain().then(() => process.exit(0), (error) => {
      process.stderr.write(`runplane: stopping failed: ${(error as Error).stack}\n`);
      process.exit(1);
    });
  }
  function cutShort(): void {
    if (beganAt === undefined) begin();
    void target.drain();
  }
  function onSignal(signal: NodeJS.Signals): void {
    if (beganAt === undefined) return begin();
    if (performance.now() - beganAt >= SIGNAL_COPY_WINDOW_MS) return cutShort();
    options.logger.info(
      { signal, window_ms: SIGNAL_COPY_WINDOW_MS },
      "a stop signal within the window of the first: taken as its copy; send another later to cut the drain short",
    );
  }
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, onSignal);
  return { begin, cutShort };
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
      `Runplane is serving ${resolve(config.appsDir)} at ${url}`,
      `Data dir ${resolve(config.dataDir)}: created project ${DEMO_PROJECT} and a 30-day demo token (shown once;`,
      `lost, mint another with ${tokenCreateCommand(config)}):`,
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
