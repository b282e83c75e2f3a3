/**
 * Starts one process in its jail: bubblewrap with the policy's arguments, the seccomp filter on a pipe,
 * and, before the command runs, its network (bubblewrap holds the child on `--block-fd` until the server
 * has attached slirp4netns and the routes).
 */
import { type ChildProcess, spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import type { Logger } from "../log.ts";
import { joinCgroupArgs } from "./_cgroups.ts";
import type { ReplicaCgroup } from "./_cgroup_tree.ts";
import { attachNetwork } from "./_network.ts";
import { bubblewrapArgs, dropPrivileges, type Identity, type JailSpec, type SupportFiles } from "./_policy.ts";

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
  // Held on --block-fd only while its network is attached: a jail without one starts at once, never
  // waiting for a turn of the server's event loop (a busy server's turn is part of a cold start).
  const network = options.spec.egress && support.slirp;
  const fds = {
    seccomp: support.seccomp ? base : undefined,
    info: network ? base + 1 : undefined,
    block: network ? base + 2 : undefined,
  };
  const policy = bubblewrapArgs(options.spec, { identity: options.identity, files: options.files, fds });
  const jailed = [...policy, ...dropPrivileges(options.identity), command, ...args];
  const started = options.cgroup
    ? joinCgroupArgs(options.cgroup, support.bwrap, jailed)
    : { command: support.bwrap, args: jailed };
  const child: ChildProcess = spawn(started.command, started.args, {
    cwd: "/",
    env: options.env,
    detached: true,
    stdio: [...options.stdio, support.seccomp ? "pipe" : "ignore", ...(network ? ["pipe", "pipe"] as const : [])],
  });
  if (child.pid === undefined) return child;
  // bubblewrap closes each of these once read; what it leaves unread must not crash the server.
  for (const fd of [fds.seccomp, fds.info, fds.block]) {
    if (fd !== undefined) (child.stdio[fd] as Readable | null)?.on("error", () => undefined);
  }
  if (support.seccomp) (child.stdio[fds.seccomp!] as Writable).end(support.seccomp);
  if (!network) return child;
  const block = child.stdio[fds.block!] as Writable;
  void (async () => {
    const pid = await childPid(child.stdio[fds.info!] as Readable);
    const attached = await attachNetwork(pid, { asRoot: options.identity.kind === "root", blocked: support.blocked });
    child.once("exit", () => attached.detach());
    if (child.exitCode !== null || child.signalCode !== null) attached.detach();
    block.end("x");
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
