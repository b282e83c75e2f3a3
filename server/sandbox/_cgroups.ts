/**
 * Per-replica resource limits with cgroups: memory (swap included), a CPU quota and a pids limit, in a
 * cgroup of its own that the replica's first process joins before it runs anything (`joinCgroupArgs`).
 * v2 (the unified hierarchy) when it holds the controllers, else v1; chosen once at start, with a probe
 * that does what every replica will do. Knows nothing of apps or runs.
 */
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, readlinkSync, statfsSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { Logger } from "../log.ts";
import { CgroupMovePrimer } from "./_cgroup_move_primer.ts";
import { isAlive } from "./_identity.ts";
import { type CgroupLayout, cgroupLayout, type Controller, CONTROLLERS } from "./_cgroup_layout.ts";
import {
  type CgroupBase,
  CgroupTree,
  type FolderVerdict,
  type GoneCleanup,
  type JudgedFolder,
  type ReplicaCgroup,
  type ResourceLimits,
} from "./_cgroup_tree.ts";

/** How cgroups were set, and what this host could give. */
export interface CgroupStatus {
  /** RUNPLANE_CGROUPS. */
  setting: "auto" | "required" | "off";
  /** The hierarchy the limits are enforced with; null when they are not. */
  version: "v1" | "v2" | null;
  /** Why limits are not enforced, each with what to do; empty when they are. */
  problems: string[];
  /** The Runplane folders replicas' cgroups are made in (one per hierarchy). */
  parents: string[];
  /** The pids limit of every replica (RUNPLANE_REPLICA_PIDS). */
  pids: number;
}

/** Makes replicas' cgroups. */
export interface Cgroups {
  readonly status: CgroupStatus;
  /**
   * Makes a cgroup for one replica (`label` names it, for people) with the replica's CPU and memory and
   * the server's pids limit; null when limits are not enforced here. Throws when it cannot be made.
   */
  create(label: string, limits: Omit<ResourceLimits, "pids">): ReplicaCgroup | null;
  /** Removes this server's cgroups, killing what is left in them. */
  close(): Promise<void>;
}

/** Thrown when RUNPLANE_CGROUPS=required and cgroups cannot be written here. */
export class CgroupsUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CgroupsUnavailableError";
  }
}

/**
 * The shell that joins the cgroups and then runs the command: `sh -c SCRIPT runplane-cgroup <procs…> --
 * <command> <args…>`. It writes its own pid (the command's, once it execs) into each `cgroup.procs`, so
 * the command and every process it starts are limited from their first instruction.
 */
const JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"';

/** The command and arguments that run `command args` inside `cgroup` (from its first instruction). */
export function joinCgroupArgs(
  cgroup: ReplicaCgroup,
  command: string,
  args: string[],
): { command: string; args: string[] } {
  return {
    command: "/bin/sh",
    args: ["-c", JOIN_SCRIPT, "runplane-cgroup", ...cgroup.procsFiles, "--", command, ...args],
  };
}

/** Cgroups that limit nothing, with why (RUNPLANE_CGROUPS=off, or tests of other parts). */
export function disabledCgroups(status: Partial<CgroupStatus> = {}): Cgroups {
  return {
    status: { setting: "off", version: null, problems: [], parents: [], pids: 512, ...status },
    create: () => null,
    close: () => Promise.resolve(),
  };
}

/** `/proc/<pid>/stat`'s start time (field 22: clock ticks since boot), or the error code of reading it. */
function readStartTime(proc: string, pid: string): { startTime: string } | { code: string } {
  let text: string;
  try {
    text = readFileSync(join(proc, pid, "stat"), "utf8");
  } catch (error) {
    return { code: (error as NodeJS.ErrnoException).code ?? "unknown error" };
  }
  // The command name (field 2) may hold spaces and parentheses: fields are counted from its last `)`.
  const startTime = text.slice(text.lastIndexOf(")") + 1).trim().split(/\s+/)[19];
  return startTime && /^\d+$/.test(startTime) ? { startTime } : { code: "unparseable" };
}

/** The inode of this process's pid namespace, read through `proc`; undefined when it cannot be. */
function pidNamespace(proc: string): string | undefined {
  try {
    return /^pid:\[(\d+)\]$/.exec(readlinkSync(join(proc, "self", "ns", "pid")))?.[1];
  } catch {
    return undefined;
  }
}

/** Whether `proc` is a `/proc` of this process's pid namespace: its `self` is this process's pid. */
function procIsOurs(proc: string): boolean {
  try {
    return readlinkSync(join(proc, "self")) === String(process.pid);
  } catch {
    return false;
  }
}

/** This server's folder name: `<pid namespace>-<pid>-<start time>-<owner>`; throws when `/proc` does not say. */
function serverFolderName(owner: string): string {
  const namespace = pidNamespace("/proc");
  const started = readStartTime("/proc", "self");
  if (namespace === undefined || !("startTime" in started)) {
    // A folder that names no namespace or start time could never be proved a gone server's.
    throw new Error("this process's pid namespace and start time cannot be read from /proc/self");
  }
  return `${namespace}-${process.pid}-${started.startTime}-${owner}`;
}

/** Options of `judgeServerFolder`. */
export interface JudgeOptions {
  /** Stands for `/proc` (tests). */
  procDir?: string;
}

const SERVER_FOLDER = /^(\d+)-(\d+)-(\d+)-(.+)$/;

/**
 * Whether the server that named its folder `<pid namespace>-<pid>-<start time>-<owner>` is proved gone:
 * only when the name parses, its pid namespace is this server's, and `/proc/<pid>` positively shows that
 * no process has that pid (ENOENT, and a signal 0 finds none either: `/proc` mounted with `hidepid` hides
 * other users' processes) or that the process there started at another time. A pid and its start time
 * (clock ticks since boot; cgroups do not outlive a boot) name one process for good: once it is seen gone
 * it never comes back, so the verdict cannot go stale before the removal. Any other answer (another
 * namespace, whose pids mean nothing here; a `/proc` that cannot be read; a name of another form) proves
 * nothing, and the folder is left. A lock held by the live server (an flock) would prove no more: it too
 * ends when the process does, cgroup file systems cannot hold the file, and Node cannot flock.
 */
export function judgeServerFolder(name: string, options: JudgeOptions = {}): FolderVerdict {
  const proc = options.procDir ?? "/proc";
  const match = SERVER_FOLDER.exec(name);
  if (!match) return { state: "unknown", why: "not a server's folder name (<pid namespace>-<pid>-<start time>-<id>)" };
  const [, namespace, pid, started] = match;
  const ours = pidNamespace(proc);
  if (ours === undefined || !procIsOurs(proc)) {
    // Another namespace's /proc shows other processes under the same pids.
    return { state: "unknown", why: `${proc} is not of this server's pid namespace, or cannot be read` };
  }
  if (namespace !== ours) {
    return { state: "unknown", why: `a server of another pid namespace (${namespace}): its pids mean nothing here` };
  }
  const now = readStartTime(proc, pid);
  if ("startTime" in now) {
    return now.startTime === started
      ? { state: "running", why: `process ${pid} is running` }
      : { state: "gone", why: `process ${pid} is another one now (started at ${now.startTime})` };
  }
  if (now.code !== "ENOENT" && now.code !== "ESRCH") {
    return { state: "unknown", why: `${join(proc, pid, "stat")} could not be read (${now.code})` };
  }
  return isAlive(Number(pid))
    ? {
      state: "unknown",
      why: `${join(proc, pid)} is missing, but process ${pid} exists (is ${proc} mounted with hidepid?)`,
    }
    : { state: "gone", why: `no process ${pid}` };
}

/**
 * Says what the start's cleanup did: the servers whose folders were removed (by name: pid, start time and
 * server id), those it failed to remove, and the folders left with why (only what was proved gone goes).
 */
function logCleanup(logger: Logger, cleanup: GoneCleanup): void {
  const described = (folders: JudgedFolder[]) =>
    folders.map((folder) => {
      const [, namespace, pid, started, owner] = SERVER_FOLDER.exec(folder.name) ?? [];
      const server = owner === undefined
        ? {}
        : { pid_namespace: namespace, pid: Number(pid), start_time: started, owner };
      return { folder: folder.name, ...server, why: folder.why };
    });
  const { removed, failed, left } = cleanup;
  if (removed.length > 0) logger.info({ servers: described(removed) }, "removed the cgroups of servers that are gone");
  if (failed.length > 0) {
    logger.warn({ servers: described(failed) }, "the cgroups of servers that are gone could not all be removed");
  }
  const unproved = left.filter((folder) => folder.state === "unknown");
  if (unproved.length > 0) {
    logger.info({ folders: described(unproved) }, "left cgroups of other servers that are not proved gone");
  }
  const running = left.filter((folder) => folder.state === "running");
  if (running.length > 0) logger.debug({ servers: described(running) }, "left the cgroups of servers that run");
}

function readLayout(): CgroupLayout {
  return cgroupLayout({
    mountinfo: readFileSync("/proc/self/mountinfo", "utf8"),
    cgroup: readFileSync("/proc/self/cgroup", "utf8"),
  });
}

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return fallback;
  }
}

/** `statfs` types of the cgroup file systems (linux/magic.h). */
const CGROUP_MAGIC = { v1: 0x27e0eb, v2: 0x63677270 };

/** Throws unless `dir` is a folder of a cgroup file system of `version` (nothing is written elsewhere). */
function checkCgroupFs(dir: string, version: "v1" | "v2"): void {
  if (statfsSync(dir).type !== CGROUP_MAGIC[version]) {
    throw new Error(`${dir} is not on a cgroup ${version} file system`);
  }
}

/** The hierarchy to use: v2 where the unified hierarchy offers every controller, else v1 where each is mounted. */
function chooseBases(layout: CgroupLayout): { version: "v1" | "v2"; bases: CgroupBase[] } | string {
  if (layout.v2) {
    // A server of this process moved it to `supervisor` already: the replicas' folder is beside it.
    const dir = basename(layout.v2) === SUPERVISOR ? dirname(layout.v2) : layout.v2;
    const offered = readOr(join(dir, "cgroup.controllers"), "").trim().split(/\s+/);
    if (CONTROLLERS.every((c) => offered.includes(c))) {
      return { version: "v2", bases: [{ dir, controllers: [...CONTROLLERS] }] };
    }
  }
  const missing = CONTROLLERS.filter((c) => !layout.v1[c]);
  if (missing.length === 0) {
    const bases: CgroupBase[] = [];
    for (const controller of CONTROLLERS) {
      const dir = layout.v1[controller]!;
      const base = bases.find((b) => b.dir === dir);
      if (base) base.controllers.push(controller);
      else bases.push({ dir, controllers: [controller as Controller] });
    }
    return { version: "v1", bases };
  }
  return layout.v2
    ? `the unified hierarchy (${layout.v2}) does not offer ${CONTROLLERS.join(", ")} and cgroup v1 has no ${
      missing.join(", ")
    } hierarchy`
    : `no cgroup hierarchy with ${missing.join(", ")} is mounted`;
}

/** The folder a v2 server's process moves to, beside its replicas' `runplane/` (see `leaveV2Base`). */
const SUPERVISOR = "supervisor";

function pidsIn(dir: string): number[] {
  return readOr(join(dir, "cgroup.procs"), "").split("\n").filter(Boolean).map(Number);
}

/**
 * On v2 a cgroup whose children have controllers holds no process of its own (the root excepted): the
 * server moves itself into `<its cgroup>/supervisor`. Other processes there (a shell that started it)
 * keep that from working; the server's cgroup should be its own (systemd: a unit with Delegate=yes).
 */
function leaveV2Base(base: string): void {
  const procs = pidsIn(base);
  if (procs.length === 0) return;
  const others = procs.filter((pid) => pid !== process.pid);
  if (others.length > 0) {
    const enabled = readOr(join(base, "cgroup.subtree_control"), "").trim().split(/\s+/);
    if (CONTROLLERS.every((c) => enabled.includes(c))) return;
    throw new Error(
      `the server's cgroup ${base} holds ${others.length} other process(es), and cgroup v2 gives a cgroup's children controllers only when it holds none; start the server in a cgroup of its own`,
    );
  }
  mkdirSync(join(base, SUPERVISOR), { recursive: true });
  writeFileSync(join(base, SUPERVISOR, "cgroup.procs"), String(process.pid));
}

/**
 * Starts a process in a probe cgroup as every replica is started (limits written, the joining shell) and
 * checks that the kernel put it there: `/proc/self/cgroup` names the probe in every hierarchy used.
 */
function probe(tree: CgroupTree, pids: number): Promise<void> {
  const cgroup = tree.create("probe", { cpu: 1, memoryBytes: 64 * 1024 ** 2, pids });
  const { command, args } = joinCgroupArgs(cgroup, "/bin/cat", ["/proc/self/cgroup"]);
  return new Promise<void>((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (text: string) => (stdout += text));
    child.stderr!.setEncoding("utf8").on("data", (text: string) => (stderr += text));
    child.once("error", reject);
    child.once("close", (code) => {
      const joined = stdout.split("\n").filter((line) => line.endsWith(`/${tree.owner}/probe`)).length;
      if (code !== 0) reject(new Error(stderr.trim() || `joining the probe cgroup exited with code ${code}`));
      else if (joined < tree.hierarchies) {
        reject(
          new Error(`a process that joined the probe cgroup is not in it (${stdout.trim().replace(/\n/g, "; ")})`),
        );
      } else resolve();
    });
  }).finally(() => cgroup.remove());
}

/** Options of `createCgroups`. */
export interface CgroupsOptions {
  logger: Logger;
  /** This server's id: its folder is `<pid namespace>-<pid>-<start time>-<owner>` under each hierarchy's `runplane/`. */
  owner: string;
  /** RUNPLANE_REPLICA_PIDS. */
  pids: number;
  /** Where the server's cgroups are (tests); read from `/proc/self` otherwise. */
  layout?: CgroupLayout;
  /**
   * Whether a replica's move into its cgroup is primed (`CgroupMovePrimer`); default true. False measures
   * what priming saves (`npm run bench -- --scenario cgroups`).
   */
  primeMoves?: boolean;
}

/**
 * Finds out whether replicas' cgroups can be made here, removes those of servers that are gone, and returns
 * the cgroups for `setting`: `required` throws a `CgroupsUnavailableError` when they cannot be; `auto`
 * serves without limits and says why in `status.problems`.
 */
export async function createCgroups(setting: CgroupStatus["setting"], options: CgroupsOptions): Promise<Cgroups> {
  const { pids } = options;
  if (setting === "off") {
    return disabledCgroups({
      setting,
      pids,
      problems: ["RUNPLANE_CGROUPS=off: replicas run without memory, CPU and process limits"],
    });
  }
  let reason: string;
  try {
    const chosen = chooseBases(options.layout ?? readLayout());
    if (typeof chosen === "string") throw new Error(chosen);
    for (const base of chosen.bases) checkCgroupFs(base.dir, chosen.version);
    const tree = new CgroupTree(chosen.version, chosen.bases, serverFolderName(options.owner));
    if (chosen.version === "v2") leaveV2Base(chosen.bases[0].dir);
    tree.prepare();
    logCleanup(options.logger, await tree.removeGone((name) => judgeServerFolder(name)));
    try {
      await probe(tree, pids);
    } catch (error) {
      await tree.removeAll();
      throw error;
    }
    const primer = options.primeMoves === false ? undefined : movePrimer(chosen, options.layout);
    return liveCgroups(tree, { setting, pids, primer });
  } catch (error) {
    const message = (error as Error).message.split("\n")[0];
    reason =
      `cgroups cannot be written here (${message}); run the server as root, or in a cgroup delegated to it (systemd: Delegate=yes)`;
  }
  if (setting === "required") throw new CgroupsUnavailableError(`RUNPLANE_CGROUPS=required, but ${reason}`);
  return disabledCgroups({
    setting,
    pids,
    problems: [`${reason}: replicas run WITHOUT memory, CPU and process limits`],
  });
}

/** A cgroup name from a label: letters, digits, `.`, `_` and `-` only. */
function cgroupName(sequence: number, label: string): string {
  return `${sequence}-${label.replace(/[^A-Za-z0-9._-]+/g, ".").slice(0, 80)}`;
}

/**
 * The primer of this server's moves: its own folder's `cgroup.procs` in the first hierarchy (v1: the
 * base, where the server is; v2: where `leaveV2Base` put it). None when that folder is not known (a
 * layout given by a test) or not a cgroup file system.
 */
function movePrimer(
  chosen: { version: "v1" | "v2"; bases: CgroupBase[] },
  layout: CgroupLayout | undefined,
): CgroupMovePrimer | undefined {
  if (layout) return undefined;
  const own = chosen.version === "v1" ? chosen.bases[0].dir : readLayout().v2;
  if (own === undefined) return undefined;
  try {
    checkCgroupFs(own, chosen.version);
    return new CgroupMovePrimer(join(own, "cgroup.procs"));
  } catch {
    return undefined;
  }
}

function liveCgroups(
  tree: CgroupTree,
  options: { setting: CgroupStatus["setting"]; pids: number; primer?: CgroupMovePrimer },
): Cgroups {
  const { primer } = options;
  let made = 0;
  return {
    status: {
      setting: options.setting,
      version: tree.version,
      problems: [],
      parents: tree.parents,
      pids: options.pids,
    },
    create(label, limits) {
      const cgroup = tree.create(cgroupName(++made, label), { ...limits, pids: options.pids });
      if (!primer) return cgroup;
      // The replica's first process joins it next: the wait that join begins with starts now.
      void primer.prime();
      return { ...cgroup, primeJoin: () => void primer.prime() };
    },
    async close() {
      primer?.close();
      await tree.removeAll();
    },
  };
}
