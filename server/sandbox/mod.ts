/**
 * The sandbox: tenants' code — every replica, template and build step — runs jailed by bubblewrap (its own
 * namespaces, no capabilities, a seccomp filter, the system read-only, its own folders, a private /tmp
 * and HOME, an environment built from scratch, no host or private address). This folder knows nothing of
 * runs or apps: the runtime and the builder ask it for a jailed process. See `_policy.ts` for the rules.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { chmod, chown, lchown, lstat, mkdir, readdir } from "node:fs/promises";
import { homedir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { Logger } from "../log.ts";
import { identityFor, serverIsRoot, SupportDir } from "./_identity.ts";
export { hostProgramInImage } from "./_host_setpriv.ts";
export { isAlive, layerBuilder } from "./_identity.ts";

/**
 * Who owns on the host the files `projectId`'s jailed processes write (a project volume's folder): the
 * project's own uid on a root server, the server's uid otherwise (its jails map theirs to it).
 */
export function projectOwner(projectId: string): { uid: number; gid: number } {
  const identity = identityFor(projectId);
  return identity.kind === "root"
    ? { uid: identity.uid, gid: identity.gid }
    : { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
}
export { copyImageRoot } from "./_image_copy.ts";
import { joinCgroupArgs } from "./_cgroups.ts";
import type { ReplicaCgroup } from "./_cgroup_tree.ts";
import { type JailSupport, spawnJailed } from "./_jail.ts";
import { BLOCKED_RANGES, hostAddresses } from "./_network.ts";
import { openNetworkGate } from "./_network_gate.ts";
import { baseEnvironment, type Identity, type JailSpec, SANDBOX_HOME } from "./_policy.ts";

export type { ReplicaCgroup, ResourceLimits } from "./_cgroup_tree.ts";
export {
  type CgroupStatus,
  type Cgroups,
  type CgroupsOptions,
  CgroupsUnavailableError,
  createCgroups,
  disabledCgroups,
} from "./_cgroups.ts";
export { forgetImageRoot, type ImageRoot } from "./_image_root.ts";
export { BLOCKED_RANGES } from "./_network.ts";
export type { HostFile, JailMount, JailSpec } from "./_policy.ts";

const execFileAsync = promisify(execFile);
const SECCOMP_SCRIPT = fileURLToPath(new URL("./_seccomp.py", import.meta.url));
/** The system's interpreter, where Debian's python3-seccomp lives (a PATH python3 may be another one). */
const SYSTEM_PYTHON = "/usr/bin/python3";

/** How the sandbox was set, and what this host could give. */
export interface SandboxStatus {
  /** RUNPLANE_SANDBOX. */
  setting: "auto" | "required" | "off";
  /** Whether tenants' processes run jailed. */
  jailed: boolean;
  /** What is missing or weaker than the full policy, each with what to do; empty when complete. */
  problems: string[];
  /** `root`: each project's processes run as a uid of their own; `user`: in a user namespace of the server's uid. */
  identity?: "root" | "user";
}

/** Options of `Sandbox.spawn`. */
export interface SandboxSpawnOptions {
  jail: JailSpec;
  /** stdio as `child_process.spawn` takes it (0–2 and any protocol pipes). */
  stdio: Array<"pipe" | "ignore">;
  /** The cgroup the process (and all it starts) is in from its first instruction, jailed or not. */
  cgroup?: ReplicaCgroup;
  /**
   * The index in `stdio` of a pipe (`"pipe"`) that the command reads once before it needs its network (a
   * Python worker, before main.py). The command then starts at once instead of being held while its
   * network is attached, and the sandbox writes `x` on this pipe and closes it once the network is in:
   * at once where there is none. When the network cannot be set up the process group is killed, as
   * without a gate. Without one, the command starts once its network is in.
   */
  networkGate?: number;
}

/** Gives jailed processes; `spawn` starts each in its own process group. */
export interface Sandbox {
  readonly status: SandboxStatus;
  /** Starts `command` in a jail (or, when the sandbox is off, as a plain process with the same environment). */
  spawn(command: string, args: string[], options: SandboxSpawnOptions): ChildProcess;
  /**
   * Gives the tree at `path`, which the server just made, to `principal`'s uid for good (a project id, or a
   * `layerBuilder`), when the server is root; a no-op otherwise. It refuses a tree holding a link. There is
   * no giving back: once a tenant's step has written a tree, the server never walks it as root again.
   */
  handOver(path: string, principal: string): Promise<void>;
  /** Folder for a jailed process's sockets, owned by its project's uid; removed with the sandbox. */
  socketDir(projectId: string, name: string): Promise<string>;
  /**
   * Takes a `socketDir` back from its project once the sockets `names` are bound in it: the folder becomes
   * the server's and unwritable to the project, then each name must be a socket, never a link. So the server
   * never connects through a name the tenant can change (a link to a host socket). Resolves false while a
   * name is still missing; throws when one is not a socket.
   */
  sealSocketDir(dir: string, names: string[]): Promise<boolean>;
  /** Removes the sandbox's host-side files. */
  close(): void;
}

/** Thrown when RUNPLANE_SANDBOX=required and the sandbox cannot run here. */
export class SandboxUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandboxUnavailableError";
  }
}

/**
 * Gives the tree at `path` to `uid`: `lchown` on every entry, and a link anywhere is refused. It is only ever
 * called on a tree the server itself just made (an extracted bundle, an empty folder), which holds no link
 * and which no tenant could write yet: after a tenant's step the server never walks its tree again.
 */
async function giveTree(path: string, uid: number, gid: number): Promise<void> {
  const stat = await lstat(path);
  if (stat.isSymbolicLink()) throw new Error(`${path} is a link; a tree handed to a tenant holds none`);
  await lchown(path, uid, gid);
  if (!stat.isDirectory()) return;
  for (const entry of await readdir(path)) await giveTree(join(path, entry), uid, gid);
}

/**
 * Spawns processes unjailed: only the environment is built from scratch (no setting, key or secret of the
 * server's). An image root is refused rather than run with chroot: chroot needs root, and as root the
 * tenant's image (its loader, its libraries) would run with every privilege of the server's.
 */
function plainSpawn(command: string, args: string[], options: SandboxSpawnOptions): ChildProcess {
  if (options.jail.mounts?.length) {
    throw new Error(
      "a project volume is shown only in a jail, and the sandbox is off here (RUNPLANE_SANDBOX, bubblewrap)",
    );
  }
  if (options.jail.image) {
    throw new Error(
      `${options.jail.image.root}: an image's root file system runs only jailed, and the sandbox is off here (RUNPLANE_SANDBOX, bubblewrap)`,
    );
  }
  const env = {
    ...baseEnvironment({ home: homedir(), path: process.env.PATH }),
    ...options.jail.env,
  };
  const started = options.cgroup ? joinCgroupArgs(options.cgroup, command, args) : { command, args };
  const child = spawn(started.command, started.args, {
    cwd: options.jail.cwd,
    env,
    detached: true,
    stdio: options.stdio,
  });
  // Unjailed, the process has the host's network from its start: its gate opens at once.
  if (options.networkGate !== undefined) openNetworkGate(child, options.networkGate);
  return child;
}

/** A sandbox that jails nothing (RUNPLANE_SANDBOX=off, or tests of other parts): plain processes, clean environment. */
export function unjailedSandbox(setting: SandboxStatus["setting"] = "off", problems: string[] = []): Sandbox {
  let support: SupportDir | undefined;
  return {
    status: { setting, jailed: false, problems },
    spawn: plainSpawn,
    handOver: () => Promise.resolve(),
    socketDir(_projectId, name) {
      support ??= new SupportDir();
      return Promise.resolve(makeSocketDir(support, name));
    },
    sealSocketDir,
    close: () => support?.remove(),
  };
}

async function sealSocketDir(dir: string, names: string[]): Promise<boolean> {
  const found = await Promise.all(names.map((name) => lstat(join(dir, name)).then(() => true, () => false)));
  if (found.includes(false)) return false;
  // The folder is the server's own (its parent is too), so no link stands in its place.
  if (serverIsRoot()) {
    await lchown(dir, 0, 0);
    await chmod(dir, 0o711);
  }
  for (const name of names) {
    if (!(await lstat(join(dir, name))).isSocket()) {
      throw new Error(`${name} in the replica's socket folder is not a socket; a replica's sockets are its relay's`);
    }
  }
  return true;
}

/**
 * The longest path of a socket's folder: a Unix socket's whole path must fit `sun_path` (108 bytes with
 * its NUL), and the longest socket name put in one (`probe.sock`) takes 11 more.
 */
const SOCKET_DIR_MAX = 96;

async function makeSocketDir(support: SupportDir, name: string): Promise<string> {
  const dir = join(support.path, name);
  if (Buffer.byteLength(dir) > SOCKET_DIR_MAX) {
    throw new Error(
      `The socket folder ${dir} is longer than a Unix socket's path allows (${SOCKET_DIR_MAX} bytes): give the server a shorter TMPDIR`,
    );
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  return dir;
}

async function which(command: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? "").split(":").concat(["/usr/bin", "/bin"])) {
    const path = join(dir || ".", command);
    if (await lstat(path).then((s) => s.isFile() || s.isSymbolicLink(), () => false)) return path;
  }
  return undefined;
}

async function compileSeccomp(): Promise<Buffer> {
  const { stdout } = await execFileAsync(SYSTEM_PYTHON, [SECCOMP_SCRIPT], { encoding: "buffer" });
  if (stdout.length === 0 || stdout.length % 8 !== 0) throw new Error("the filter compiled to no BPF program");
  return stdout;
}

/** Runs `/bin/true` in a jail built like every other: whatever stops it here stops the sandbox. */
function probeOnce(support: JailSupport, files: SupportDir, egress: boolean): Promise<void> {
  const identity = identityFor("runplane-probe");
  const child = spawnJailed(support, "/bin/true", [], {
    spec: { projectId: "runplane-probe", cwd: "/", egress, env: {} },
    identity,
    files: files.files(identity),
    stdio: ["ignore", "ignore", "pipe"],
    env: baseEnvironment({ home: SANDBOX_HOME }),
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (text: string) => (stderr += text));
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => {
      if (code === 0) resolve();
      else reject(new Error(stderr.trim() || `bubblewrap exited with code ${code}`));
    });
  });
}

/** `probeOnce`, tried three times: one failure on a loaded host must not leave the server unjailed for good. */
async function probe(support: JailSupport, files: SupportDir, egress: boolean): Promise<void> {
  for (let attempt = 1;; attempt++) {
    try {
      return await probeOnce(support, files, egress);
    } catch (error) {
      if (attempt === 3) throw error;
    }
  }
}

/**
 * Finds out what this host can jail with and returns the sandbox for `setting`. `required` throws a
 * `SandboxUnavailableError` when any part is missing; `auto` serves unjailed (or with a weaker jail)
 * and reports every problem in `status.problems`, which the server logs loudly and shows.
 */
export async function createSandbox(
  setting: SandboxStatus["setting"],
  options: { logger: Logger },
): Promise<Sandbox> {
  if (setting === "off") return unjailedSandbox("off", ["RUNPLANE_SANDBOX=off: tenants' code runs unjailed"]);
  const problems: string[] = [];
  const bwrap = await which("bwrap");
  const slirp = (await which("slirp4netns")) !== undefined;
  if (!slirp) problems.push("slirp4netns is missing: apps with egress get no network (apt-get install slirp4netns)");
  const seccomp = await compileSeccomp().catch((error: Error) => {
    problems.push(
      `the seccomp filter cannot be compiled (${
        error.message.split("\n")[0]
      }): jailed processes run without it (apt-get install python3-seccomp)`,
    );
    return undefined;
  });
  let files: SupportDir | undefined;
  let reason: string | undefined;
  if (!bwrap) reason = "bubblewrap is missing (apt-get install bubblewrap)";
  else {
    files = new SupportDir();
    const blocked = [...BLOCKED_RANGES, ...hostAddresses()];
    const support: JailSupport = { bwrap, seccomp, slirp, blocked, logger: options.logger };
    try {
      await probe(support, files, false);
      if (slirp) {
        await probe(support, files, true).catch((error: Error) => {
          support.slirp = false;
          problems.push(
            `slirp4netns cannot give a jail its network here (${error.message}): apps with egress get none`,
          );
        });
      }
      if (setting === "required" && problems.length) {
        throw new SandboxUnavailableError(`RUNPLANE_SANDBOX=required, but ${problems.join("; ")}`);
      }
      return jailedSandbox(support, files, { setting, problems });
    } catch (error) {
      if (error instanceof SandboxUnavailableError) {
        files.remove();
        throw error;
      }
      files.remove();
      reason = `bubblewrap cannot start a jail here (${(error as Error).message}); user namespaces may be off`;
    }
  }
  if (setting === "required") throw new SandboxUnavailableError(`RUNPLANE_SANDBOX=required, but ${reason}`);
  return unjailedSandbox("auto", [`${reason}: tenants' code runs UNJAILED`, ...problems]);
}

/**
 * Who `spec`'s process is: its principal's identity, or, for a writable image root's build step, uid 0 of
 * its own user namespace started as the principal's uid (a root server) or the server's own.
 */
function jailIdentity(spec: JailSpec): Identity {
  const identity = identityFor(spec.projectId);
  if (!spec.image?.writable) return identity;
  return identity.kind === "root"
    ? { kind: "inside-root", host: { uid: identity.uid, gid: identity.gid } }
    : { kind: "inside-root" };
}

function jailedSandbox(support: JailSupport, files: SupportDir, status: Omit<SandboxStatus, "jailed">): Sandbox {
  return {
    status: { ...status, jailed: true, identity: serverIsRoot() ? "root" : "user" },
    spawn(command, args, options) {
      const identity = jailIdentity(options.jail);
      return spawnJailed(support, command, args, {
        spec: options.jail,
        identity,
        files: files.files(identity),
        stdio: options.stdio,
        env: { ...baseEnvironment({ home: SANDBOX_HOME }), ...options.jail.env },
        cgroup: options.cgroup,
        networkGate: options.networkGate,
      });
    },
    async handOver(path, principal) {
      const identity = identityFor(principal);
      if (identity.kind === "root") await giveTree(path, identity.uid, identity.gid);
    },
    async socketDir(projectId, name) {
      const dir = await makeSocketDir(files, name);
      const identity = identityFor(projectId);
      if (identity.kind === "root") await chown(dir, identity.uid, identity.gid);
      return dir;
    },
    sealSocketDir,
    close: () => files.remove(),
  };
}
