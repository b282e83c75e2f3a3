/**
 * The server as a child process (`node --import tsx server/main.ts`), for crash tests: started on a data
 * dir, killed with SIGKILL, restarted on the same data dir.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { writeApp } from "./apps.ts";
import { createTestClient, type TestClient } from "./client.ts";
import { SERVER_NODE_FLAGS } from "../../server/node_flags.ts";
import { freePort } from "../../server/runtime/free_port.ts";
import { TEST_MASTER_KEY } from "./postgres.ts";
import { testServerSandbox } from "./sandbox.ts";

const MAIN = join(import.meta.dirname, "..", "..", "server", "main.ts");

/**
 * How to start the server: the bundle `npm test` built (scripts/server_bundle.ts: the same code, starting in
 * half the CPU), or the sources through tsx when a test file runs on its own.
 */
function serverArgs(entry?: string): string[] {
  if (entry) return [entry];
  const bundle = process.env.RUNPLANE_TEST_SERVER_BUNDLE;
  return [...SERVER_NODE_FLAGS, ...(bundle ? [bundle] : ["--import", "tsx", MAIN])];
}

/** How long a server process may take to report that it listens (generous: ten start at once under load). */
const START_TIMEOUT_MS = 90_000;

/** The project a fresh data dir's printed demo token belongs to (`DEMO_PROJECT` of server/main.ts). */
export const PROCESS_PROJECT = "p-demo";

/** A temporary folder to serve from: `data/`, `apps/<project>/`, and the environment naming them. */
export interface ServerDirs {
  /** The temporary folder; tests may keep other files in it (it is removed whole). */
  root: string;
  dataDir: string;
  appsDir: string;
  /** `RUNPLANE_DATA_DIR` and `RUNPLANE_APPS_DIR`, to spread into `startServerProcess`'s environment. */
  env: { RUNPLANE_DATA_DIR: string; RUNPLANE_APPS_DIR: string };
  /** Writes app `name` of `PROCESS_PROJECT` (or `project`) with `files` (`runplane.toml` among them). */
  deploy(name: string, files: Record<string, string>, options?: { project?: string }): Promise<string>;
  /** Removes the whole folder. */
  remove(): Promise<void>;
}

/** Makes a fresh `ServerDirs` under the system's temporary folder, its name starting with `prefix`. */
export async function makeServerDirs(prefix: string): Promise<ServerDirs> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  const dataDir = join(root, "data");
  const appsDir = join(root, "apps");
  await mkdir(join(appsDir, PROCESS_PROJECT), { recursive: true });
  return {
    root,
    dataDir,
    appsDir,
    env: { RUNPLANE_DATA_DIR: dataDir, RUNPLANE_APPS_DIR: appsDir },
    deploy: (name, files, options = {}) =>
      writeApp(appsDir, name, { project: options.project ?? PROCESS_PROJECT, files }),
    remove: () => rm(root, { recursive: true, force: true }),
  };
}

/** A running server process. */
export interface ServerProcess {
  child: ChildProcess;
  url: string;
  /** The demo token printed on a fresh data dir, or the one passed in. */
  token: string;
  client: TestClient;
  /** Every JSON log line so far. */
  logs: Array<Record<string, unknown>>;
  /** SIGKILL, and resolves once the process is gone. */
  kill(): Promise<void>;
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** What the process wrote to stderr so far. */
  stderr(): string;
  /** What the process wrote to stdout so far, less its JSON log lines: the start banner. */
  banner(): string;
}

/** Options of `startServerProcess`. */
export interface ServerProcessOptions {
  token?: string;
  ownProcessGroup?: boolean;
  entry?: string;
  /** Starts the server through another command: gets the server's argv (Node first), returns the one to run. */
  wrap?(argv: string[]): string[];
}

/**
 * Starts the server with `env` (data and apps dirs, lease, …) over a clean environment; resolves once it
 * listens. `ownProcessGroup` starts it as the leader of a new process group (signal it with
 * `process.kill(-child.pid, signal)`); `entry` runs that JavaScript file (a built `dist/server/main.js`)
 * with plain Node instead of the sources; `wrap` starts it through another command (`unshare …`).
 */
export async function startServerProcess(
  env: Record<string, string>,
  options: ServerProcessOptions = {},
): Promise<ServerProcess> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNPLANE_")));
  const argv = [process.execPath, ...serverArgs(options.entry)];
  const [command, ...args] = options.wrap ? options.wrap(argv) : argv;
  const child = spawn(command, args, {
    env: {
      ...base,
      PORT: "0",
      HOST: "127.0.0.1",
      RUNPLANE_LOG_LEVEL: "info",
      // The host budget of a test machine (two cores) would hold tests that start several replicas to a couple
      // at a time; the tests of that budget set their own.
      RUNPLANE_HOST_CPU: "256",
      RUNPLANE_HOST_MEMORY: "1024gb",
      // One process, whatever the machine's cores (`auto` forks workers from 4 up); the tests of workers set theirs.
      RUNPLANE_WORKERS: "1",
      RUNPLANE_SANDBOX: await testServerSandbox(),
      // A PostgreSQL store needs a master key; servers of one test share it unless `env` gives another.
      ...(env.RUNPLANE_DATABASE_URL ? { RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } : {}),
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
    // Leading its own group, the server can be signalled as a terminal or systemd does: the whole group.
    detached: options.ownProcessGroup ?? false,
  });
  const logs: Array<Record<string, unknown>> = [];
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  );
  let stderr = "";
  child.stderr!.on("data", (chunk) => (stderr += String(chunk)));
  const banner: string[] = [];
  const started = new Promise<{ url: string; token: string }>((resolve, reject) => {
    let url = "";
    let token = options.token ?? "";
    const seen: string[] = [];
    // A server that neither listens nor exits fails the test with what it wrote, instead of hanging it.
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `The server process did not report listening within ${START_TIMEOUT_MS} ms (url ${url || "not seen"}, `
            + `token ${token ? "seen" : "not seen"}); stdout: ${JSON.stringify(seen)}; stderr: ${stderr}`,
        ),
      );
    }, START_TIMEOUT_MS);
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`The server process exited before it listened: ${stderr}`));
    });
    const lines = createInterface({ input: child.stdout! });
    const done = () => {
      if (!url || !token) return;
      clearTimeout(timer);
      resolve({ url, token });
    };
    lines.on("line", (line) => {
      if (seen.length < 50) seen.push(line);
      if (line.startsWith("{")) {
        let entry: Record<string, unknown>;
        try {
          entry = JSON.parse(line) as Record<string, unknown>;
        } catch {
          return; // kept in `seen`, for the start timeout's message: a throw here would hang the start
        }
        logs.push(entry);
        if (entry.msg === "listening") url = String(entry.url);
        done();
        return;
      }
      banner.push(line);
      const match = /export RUNPLANE_TOKEN=(\S+)/.exec(line);
      if (match) token = match[1];
      done();
    });
  });
  const { url, token } = await started;
  return {
    child,
    url,
    token,
    client: createTestClient(url, token),
    logs,
    exited,
    stderr: () => stderr,
    banner: () => banner.join("\n"),
    async kill() {
      child.kill("SIGKILL");
      await exited;
    },
  };
}

/** Options of `startClusterHost`. */
export interface ClusterHostOptions {
  /** The PostgreSQL database the cluster shares. */
  databaseUrl: string;
  /** The token to use (the first host's printed one; the first host prints its own). */
  token?: string;
  /** More environment variables, over these defaults. */
  env?: Record<string, string>;
}

/**
 * Starts a host of a cluster (issue 31) on `dirs`: a free port it advertises as `RUNPLANE_ADVERTISE_URL`,
 * the shared database and test master key, a 3 s lease, and no jail (the tests' functions write and read
 * marker files, which a jailed replica cannot; test/sandbox/ covers the jail).
 */
export async function startClusterHost(dirs: ServerDirs, options: ClusterHostOptions): Promise<ServerProcess> {
  // A host advertises its URL, so its port is chosen before it starts, and another process may take that
  // port in between (seen in CI: EADDRINUSE). The server then refuses to start, as it should; the test
  // picks another port.
  for (let attempt = 1;; attempt++) {
    const port = await freePort();
    try {
      return await startServerProcess({
        ...dirs.env,
        PORT: String(port),
        RUNPLANE_ADVERTISE_URL: `http://127.0.0.1:${port}`,
        RUNPLANE_DATABASE_URL: options.databaseUrl,
        RUNPLANE_MASTER_KEY: TEST_MASTER_KEY,
        RUNPLANE_DATABASE_POOL: "4",
        RUNPLANE_RUN_LEASE: "3s",
        RUNPLANE_SANDBOX: "off",
        ...options.env,
      }, { token: options.token });
    } catch (error) {
      if (attempt >= 3 || !/cannot listen on .*EADDRINUSE/.test(String(error))) throw error;
    }
  }
}
