/**
 * Starts one process in its jail: bubblewrap with the policy's arguments, the seccomp filter on a pipe,
 * and its network: bubblewrap holds the child on `--block-fd` until the server has attached slirp4netns
 * and the routes, or, for a command that waits for it itself (a network gate), the command starts at
 * once and is told on its gate.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, constants, fstatSync, mkdirSync, openSync, rmdirSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Readable, Writable } from "node:stream";
import type { Logger } from "../log.ts";
import { joinCgroupArgs } from "./_cgroups.ts";
import type { ReplicaCgroup } from "./_cgroup_tree.ts";
import { checkImageRoot, checkWritableMountPoints, readOnlyImageRoot } from "./_image_root.ts";
import { setprivOptions } from "./_host_setpriv.ts";
import { attachNetwork } from "./_network.ts";
import { openNetworkGate } from "./_network_gate.ts";
import {
  bubblewrapArgs,
  dropPrivileges,
  type Identity,
  type JailSpec,
  type RootLayout,
  type SupportFiles,
} from "./_policy.ts";

/** What every jail of this server shares. */
export interface JailSupport {
  bwrap: string;
  /** The compiled filter; undefined where python3-seccomp is missing (the status says so). */
  seccomp?: Buffer;
  /** Whether slirp4netns is here: without it, an app with egress gets no network either. */
  slirp: boolean;
  /** Ranges refused to processes with egress. */
  blocked: string[];
  logger: Logger;
}

/** Reads bubblewrap's `--info-fd` JSON until it names the child's pid. */
function childPid(info: Readable): Promise<number> {
  return new Promise((resolve, reject) => {
    let text = "";
    info.setEncoding("utf8");
    const onData = (chunk: string) => {
      text += chunk;
      const match = /"child-pid":\s*(\d+)/.exec(text);
      if (match) {
        info.off("data", onData);
        info.resume();
        resolve(Number(match[1]));
      }
    };
    info.on("data", onData);
    info.once("end", () => reject(new Error("bubblewrap ended before it started the command")));
    info.once("error", reject);
  });
}

/** Options of `spawnJailed`. */
export interface SpawnJailedOptions {
  spec: JailSpec;
  identity: Identity;
  files: SupportFiles;
  /** The child's stdio up to its own descriptors (0–2 and protocol pipes); the jail's follow. */
  stdio: Array<"pipe" | "ignore">;
  env: Record<string, string>;
  /** The cgroup bubblewrap joins before it starts (so the whole jail is in it from its first process). */
  cgroup?: ReplicaCgroup;
  /** The stdio index of the command's network gate (`SandboxSpawnOptions.networkGate`), if it has one. */
  networkGate?: number;
}

/** Linux's O_PATH (Node's `fs.constants` leaves it out): a descriptor that names a file without opening it. */
const O_PATH = 0o10000000;
/** The host's setpriv, run by a root server (outside any jail) to start a writable root's bubblewrap as the principal. */
const SETPRIV = "/usr/bin/setpriv";
/** util-linux's unshare: the mount namespace in which a build step's root is staged. */
const UNSHARE = "/usr/bin/unshare";

/** A writable image root: the root and the spec's paths passed to bubblewrap as descriptors from `first` on. */
interface WritableRoot {
  layout: RootLayout;
  bindFds: Map<string, number>;
  /** The descriptors, in the order of their numbers, to close once spawned. */
  opened: number[];
  /** Where the root is bound for bubblewrap (a writable root): an empty folder the principal can reach. */
  stage?: { root: string; at: string };
}

/**
 * Opens the spec's host paths for bubblewrap, which on a root server runs as the principal's uid and cannot
 * traverse the 0700 data dir, so it binds what the server opened (`--bind-fd`). The root itself is bound at
 * `stage` (see `starter`): bubblewrap in its own user namespace cannot follow a descriptor's link to a folder
 * whose path it could not walk, and the root of a build is in the data dir.
 */
function openWritableRoot(spec: JailSpec, options: { first: number; stage?: string }): WritableRoot {
  const opened: number[] = [];
  const bindFds = new Map<string, number>();
  try {
    for (const path of [...spec.readOnly ?? [], ...spec.writable ?? []]) {
      if (bindFds.has(path)) continue;
      bindFds.set(path, options.first + opened.length);
      opened.push(openSync(path, O_PATH));
    }
  } catch (error) {
    for (const fd of opened) closeSync(fd);
    throw error;
  }
  // bubblewrap, as uid 0 of its namespace, makes what mount points it needs in the step's own copy.
  // An unprivileged server's bubblewrap is the server's uid, which walks the data dir: no stage is needed.
  const root = spec.image!.root;
  const layout = { system: ["--bind", options.stage ?? root, "/"], inImage: () => true, readOnlyRoot: false };
  return { layout, bindFds, opened, ...(options.stage ? { stage: { root, at: options.stage } } : {}) };
}

/** The layout of the spec's image root, if any (throws, naming the path, on an image that cannot run). */
function imageLayout(
  spec: JailSpec,
  options: { identity: Identity; first: number; stage: () => string | undefined },
): WritableRoot | undefined {
  const { identity, first } = options;
  if (!spec.image) return undefined;
  if (!spec.image.writable) {
    return { layout: readOnlyImageRoot({ ...spec, image: spec.image }), bindFds: new Map(), opened: [] };
  }
  if (identity.kind !== "inside-root") {
    throw new Error("A writable image root runs only as uid 0 of its own user namespace");
  }
  checkImageRoot(spec.image);
  checkWritableMountPoints({ ...spec, image: spec.image });
  return openWritableRoot(spec, { first, stage: options.stage() });
}

/**
 * Opens each of `spec.mounts`' sources (a project volume's files folder) for bubblewrap to bind by
 * descriptor: without following a link at the last step (`O_NOFOLLOW` with `O_DIRECTORY`: a link is
 * ENOTDIR) and checked to be a folder, so what is bound is the folder the server looked at. The
 * descriptors are numbered from `first`, after the image's own.
 */
function openMountSources(
  spec: JailSpec,
  options: { first: number },
): { bindFds: Map<string, number>; opened: number[] } {
  const bindFds = new Map<string, number>();
  const opened: number[] = [];
  try {
    for (const mount of spec.mounts ?? []) {
      if (bindFds.has(mount.source)) continue;
      const fd = openSync(mount.source, O_PATH | constants.O_NOFOLLOW | constants.O_DIRECTORY);
      opened.push(fd);
      if (!fstatSync(fd).isDirectory()) throw new Error(`${mount.source} is not a folder`);
      bindFds.set(mount.source, options.first + opened.length - 1);
    }
  } catch (error) {
    for (const fd of opened) closeSync(fd);
    throw error;
  }
  return { bindFds, opened };
}

/**
 * An empty folder where a build step's writable root is bound for its bubblewrap: in the sandbox's support
 * folder (0711, the server's), searchable by every uid, unlike the data dir.
 */
function makeStage(files: SupportFiles): string {
  const stage = join(dirname(files.hosts), `stage-${randomBytes(8).toString("hex")}`);
  mkdirSync(stage, { mode: 0o755 });
  return stage;
}

/**
 * The host command that starts bubblewrap. For a root server's build step with a writable root: in a
 * mount namespace of its own (private: nothing it mounts reaches the host's), the root is bound at its
 * stage by root, then setpriv becomes the principal's uid before bubblewrap runs.
 */
function starter(bwrap: string, options: { identity: Identity; stage?: WritableRoot["stage"] }): string[] {
  const { identity, stage } = options;
  if (identity.kind !== "inside-root" || !identity.host) return [bwrap];
  const { uid, gid } = identity.host;
  const drop = [SETPRIV, ...setprivOptions({ uid, gid }), bwrap];
  if (!stage) return drop;
  return [
    UNSHARE,
    "--mount",
    "--propagation",
    "private",
    "--",
    "/bin/sh",
    "-c",
    'mount --bind -- "$1" "$2" && shift 2 && exec "$@"',
    "sh",
    stage.root,
    stage.at,
    ...drop,
  ];
}

/**
 * Spawns `command` jailed, leading its own process group; the command runs once its network is ready.
 * When that fails the whole group is killed and the child exits like any process that failed to start.
 */
export function spawnJailed(
  support: JailSupport,
  command: string,
  args: string[],
  options: SpawnJailedOptions,
): ChildProcess {
  const base = options.stdio.length;
  // Held on --block-fd only while its network is attached, and only when it has no gate of its own: a
  // jail without network starts at once, never waiting for a turn of the server's event loop (a busy
  // server's turn is part of a cold start), and a gated one runs up to its gate while the network attaches.
  const network = options.spec.egress && support.slirp;
  const gate = options.networkGate;
  const fds = {
    seccomp: support.seccomp ? base : undefined,
    info: network ? base + 1 : undefined,
    block: network && gate === undefined ? base + 2 : undefined,
  };
  const image = imageLayout(options.spec, {
    identity: options.identity,
    first: base + 3,
    stage: () =>
      options.identity.kind === "inside-root" && options.identity.host ? makeStage(options.files) : undefined,
  });
  let mounts: ReturnType<typeof openMountSources>;
  try {
    mounts = openMountSources(options.spec, { first: base + 3 + (image?.opened.length ?? 0) });
  } catch (error) {
    for (const fd of image?.opened ?? []) closeSync(fd);
    if (image?.stage) rmdirSync(image.stage.at);
    throw error;
  }
  const policy = bubblewrapArgs(options.spec, {
    identity: options.identity,
    files: options.files,
    fds,
    layout: image?.layout,
    bindFds: new Map([...image?.bindFds ?? [], ...mounts.bindFds]),
  });
  const drop = dropPrivileges(options.identity, { image: options.spec.image !== undefined });
  const begin = starter(support.bwrap, { identity: options.identity, stage: image?.stage });
  const [first, ...rest] = [...begin, ...policy, ...drop, command, ...args];
  const started = options.cgroup ? joinCgroupArgs(options.cgroup, first, rest) : { command: first, args: rest };
  // The image's descriptors follow seccomp, info and block (placeholders where those are unused).
  const opened = [...image?.opened ?? [], ...mounts.opened];
  const held = network
    ? ["pipe", gate === undefined ? "pipe" : "ignore"] as const
    : opened.length
    ? ["ignore", "ignore"] as const
    : [];
  let child: ChildProcess;
  try {
    child = spawn(started.command, started.args, {
      cwd: "/",
      env: options.env,
      detached: true,
      stdio: [...options.stdio, support.seccomp ? "pipe" : "ignore", ...held, ...opened],
    });
  } finally {
    for (const fd of opened) closeSync(fd);
  }
  const staged = image?.stage?.at;
  if (staged) {
    // Empty on the host (the root was bound there in the step's own mount namespace): rmdir, never rm -r.
    const unstage = () => {
      try {
        rmdirSync(staged);
      } catch (error) {
        support.logger.warn({ err: error, stage: staged }, "a build step's stage folder could not be removed");
      }
    };
    if (child.pid === undefined) unstage();
    else child.once("exit", unstage);
  }
  if (child.pid === undefined) return child;
  // bubblewrap (or the command, its gate) closes each of these once read; what is left unread must not
  // crash the server.
  for (const fd of [fds.seccomp, fds.info, fds.block, gate]) {
    if (fd !== undefined) (child.stdio[fd] as Readable | null)?.on("error", () => undefined);
  }
  if (support.seccomp) (child.stdio[fds.seccomp!] as Writable).end(support.seccomp);
  if (!network) {
    if (gate !== undefined) openNetworkGate(child, gate);
    return child;
  }
  // What lets the command go on once its network is in: bubblewrap's block, or the command's own gate.
  const release = () => {
    if (gate === undefined) (child.stdio[fds.block!] as Writable).end("x");
    else openNetworkGate(child, gate);
  };
  void (async () => {
    const pid = await childPid(child.stdio[fds.info!] as Readable);
    // A root server's build step: its network namespace belongs to the user namespace it made, which the
    // root slirp4netns must join first (entering the network namespace alone is refused).
    const inChildUserns = options.identity.kind === "inside-root" && options.identity.host !== undefined;
    const asRoot = options.identity.kind === "root" || inChildUserns;
    const attached = await attachNetwork(pid, { asRoot, inChildUserns, blocked: support.blocked });
    child.once("exit", () => attached.detach());
    if (child.exitCode !== null || child.signalCode !== null) attached.detach();
    release();
  })().catch((error: Error) => {
    support.logger.error({ err: error, command }, "the sandbox could not be set up; the process was stopped");
    try {
      process.kill(-child.pid!, "SIGKILL");
    } catch {
      // Already gone.
    }
  });
  return child;
}
