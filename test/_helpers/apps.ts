/** Deploys test apps: writes `<appsDir>/<project>/<app>/runplane.toml` and its files. */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { components } from "../../generated/api.d.ts";
import { TEST_PROJECT, type TestServer } from "./server.ts";

/** Options of `deployApp`. */
export interface DeployOptions {
  /** The text of `runplane.toml`. */
  toml: string;
  /** Other files by name, e.g. `{ "main.py": "def run(): return 1" }`. */
  files?: Record<string, string>;
  project?: string;
}

/** Writes `<appsDir>/<project>/<name>/` with `files` (by name, `runplane.toml` among them); returns its path. */
export async function writeApp(
  appsDir: string,
  name: string,
  options: { project: string; files: Record<string, string> },
): Promise<string> {
  const dir = join(appsDir, options.project, name);
  await mkdir(dir, { recursive: true });
  for (const [file, text] of Object.entries(options.files)) await writeFile(join(dir, file), text);
  return dir;
}

/** Writes an app folder under the test server's apps dir and reloads the apps; returns its path. */
export async function deployApp(t: TestServer, name: string, options: DeployOptions): Promise<string> {
  const dir = await writeApp(t.server.context.config.appsDir, name, {
    project: options.project ?? TEST_PROJECT,
    files: { ...options.files, "runplane.toml": options.toml },
  });
  await t.server.context.runtime.reload();
  return dir;
}

/**
 * Polls `check` until it returns true, failing after `timeoutMs`: a wait, never a bound on how fast the
 * server is (30 s by default: on CI's loaded two cores a warm replica's call once took over 10 s to start).
 */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

/** Whether a process with this id is alive (or exited and not yet collected by its parent: see `exited`). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether the process `pid` has exited, collected or not. `alive` counts a zombie until its parent
 * collects it, which is what a test of the parent's own handling needs (the supervisor has reaped its
 * killed worker). An orphan's parent is init, which on some hosts collects only every few seconds: this
 * VM's, a Firecracker init, ~2 s when idle, and a local .ci/run once counted a killed server's Python
 * worker alive for 15 s, gone by the time it was described.
 */
export function exited(pid: number): boolean {
  if (!alive(pid)) return true;
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return true; // collected since
  }
  const state = stat.charAt(stat.lastIndexOf(")") + 2);
  return state === "Z" || state === "X";
}

/** A synchronous call's body, per the contract. */
export type RunResult = components["schemas"]["RunResult"];

/** Calls `fn` of `app` (in `p-test`) through the validating client, typed as a synchronous call. */
export async function callFunction(t: TestServer, app: string, fn: string, body: Record<string, unknown> = {}) {
  const answer = await t.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
    params: { path: { project_id: TEST_PROJECT, app_name: app, function_name: fn } },
    // The generated type of a free-form object is `Record<string, never>`.
    body: body as Record<string, never>,
  });
  return { ...answer, data: answer.data as RunResult | undefined };
}

/** The pids of one process as the kernel lists them in `/proc/<pid>/status` (`NSpid`: the host's first, its own namespace's last). */
function namespacePids(pid: number): number[] {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return (/^NSpid:\s*(.+)$/m.exec(status)?.[1] ?? String(pid)).trim().split(/\s+/).map(Number);
  } catch {
    return [];
  }
}

/**
 * The host pids of the live processes (zombies left out) whose working folder is `appDir` and whose pid
 * in their own (sandbox's) namespace is `reportedPid`, and, given, whose start time is `startTime`.
 */
export function matchingPids(appDir: string, reportedPid: number, options: { startTime?: number } = {}): number[] {
  return readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) => {
    const pids = namespacePids(pid);
    if (pids.length < 2 || pids.at(-1) !== reportedPid) return false;
    if (options.startTime !== undefined && startTimeOf(pid) !== options.startTime) return false;
    try {
      if (/^State:\s*Z/m.test(readFileSync(`/proc/${pid}/status`, "utf8"))) return false;
      return readlinkSync(`/proc/${pid}/cwd`) === appDir;
    } catch {
      return false;
    }
  });
}

/** Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot (the same in every namespace). */
function startTimeOf(pid: number): number | undefined {
  try {
    return Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(")").at(-1)!.trim().split(/\s+/)[19]);
  } catch {
    return undefined;
  }
}

/**
 * The host's pid of a process that reported `reportedPid` from inside an app (`os.getpid()`): the same
 * number when the app runs unjailed; in a sandbox (its own pid namespace) the process whose working
 * folder is `appDir` and whose pid in its namespace is `reportedPid` (and, given, whose start time is
 * `startTime`, which tells apart two replicas that both have pid 2 in their own sandboxes). Throws
 * unless exactly one is found.
 */
export function hostPid(appDir: string, reportedPid: number, options: { startTime?: number } = {}): number {
  const found = matchingPids(appDir, reportedPid, options);
  if (found.length === 1) return found[0];
  if (found.length === 0 && namespacePids(reportedPid).length === 1) return reportedPid;
  const described = found.map((pid) => {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, "m").exec(status)?.[1];
    return `${pid}: ${field("Name")} state ${field("State")} ppid ${field("PPid")} nspid ${field("NSpid")}`;
  });
  throw new Error(`no single process of ${appDir} has pid ${reportedPid} in its namespace (${described.join("; ")})`);
}

/** Whether `pid` is an app's template (`_worker.py --template`), which forks replicas. */
function isTemplate(pid: number): boolean {
  try {
    const args = readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
    return args.includes("--template") && args.some((arg) => arg.endsWith("_worker.py"));
  } catch {
    return false;
  }
}

/**
 * The pid the server knows a replica by (in its logs): the ancestor of `pid` that the server started —
 * `pid` itself unjailed, the sandbox's bubblewrap when jailed. `serverPid` defaults to this process.
 * A replica forked from its app's template is known by its own pid.
 */
export function replicaPid(pid: number, serverPid = process.pid): number {
  let current = pid;
  /** The replica forked from a template met on the way up; still checked to descend from `serverPid`. */
  let forked: number | undefined;
  for (let depth = 0; depth < 10; depth++) {
    const status = readFileSync(`/proc/${current}/status`, "utf8");
    const parent = Number(/^PPid:\s*(\d+)$/m.exec(status)?.[1]);
    if (parent === serverPid) return forked ?? current;
    // A replica forked from its app's template is known by its own pid (the template is not the replica).
    if (forked === undefined && isTemplate(parent)) forked = current;
    if (!parent) break;
    current = parent;
  }
  throw new Error(`process ${pid} was not started by ${serverPid}`);
}

/**
 * Python source of `_server_pid()`, for a test app that reports which server process ran it: the replica's
 * parent, or its template's parent when the replica was forked from one (`_worker.py --template`).
 */
export const SERVER_PID_PY = `def _server_pid():
    parent = os.getppid()
    with open("/proc/%d/cmdline" % parent, "rb") as f:
        forked = b"--template" in f.read().split(b"\\0")
    if not forked:
        return parent
    with open("/proc/%d/stat" % parent) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
`;
