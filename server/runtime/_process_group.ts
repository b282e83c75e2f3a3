/**
 * Replicas lead their own process group (and session): a signal sent to the server's group — Ctrl-C in a
 * terminal, a container init forwarding SIGTERM to its child's group — never reaches them, so they keep
 * serving the calls the server drains and stop only when the server stops them. Stopping one signals its
 * whole group, so the processes a custom runtime starts itself stop with it. Both kinds of replica start,
 * watch and stop their process here.
 */
import type { ChildProcess } from "node:child_process";
import type { Logger } from "../log.ts";
import type { JailSpec, ReplicaCgroup, Sandbox } from "../sandbox/mod.ts";
import { memoryText } from "./_failures.ts";

/** Whether replicas lead their own group: the sandbox spawns them `detached` (in a new session) on POSIX. */
const OWN_PROCESS_GROUP = { detached: process.platform !== "win32" } as const;

/** Sends `signal` to every process in the replica's group; a no-op once the group is gone. */
export function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  if (!OWN_PROCESS_GROUP.detached) {
    child.kill(signal);
    return;
  }
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: every process of the group has exited.
  }
}

/** Options of `spawnInOwnGroup`. */
export interface ReplicaSpawnOptions {
  /** What the process may see and its environment (built from scratch: nothing of the server's). */
  jail: JailSpec;
  sandbox: Sandbox;
  /** Pipes beyond stdout and stderr (the Python worker's protocol pipes, fd 3 and up). */
  extraPipes?: number;
  /** The replica's stdout and stderr go here, as `worker output` lines. */
  logger: Logger;
  label: string;
  /** The replica's cgroup (its limits), joined before the command runs; read for OOM kills when it ends. */
  cgroup?: ReplicaCgroup;
  /** The descriptor, one of the extra pipes, that the command reads for its network (`SandboxSpawnOptions.networkGate`). */
  networkGate?: number;
}

/** How a replica's process ended. */
export interface ProcessExit {
  /** `exit code N`, `signal S`, or the spawn error's message when it could not start. */
  reason: string;
  /** Whether the kernel killed a process of the replica at its cgroup's memory limit. */
  outOfMemory: boolean;
  /** The memory limit it was killed at, when the one who tells is not the one who set it (a host's worker). */
  memoryBytes?: number;
  /** Whether its server stopped it (a drain, a close): its calls in flight were interrupted, not crashed. */
  stopped?: boolean;
}

/** A replica's process and its exit. */
export interface ReplicaProcess {
  child: ChildProcess;
  /** Resolves once the process has exited and its pipes closed. */
  exited: Promise<ProcessExit>;
  /** Its last lines of output (stdout and stderr as they came): why a server that never got ready ended. */
  lastOutput(): string[];
}

/** How many lines of a replica's output `lastOutput` keeps, and how long each may be. */
const TAIL_LINES = 20;
const TAIL_LINE_CHARS = 500;

/**
 * Starts a replica's process in its sandbox, leading its own process group, with stdout and stderr logged
 * line by line as `worker output` (the function's logs).
 */
export function spawnInOwnGroup(command: string, args: string[], options: ReplicaSpawnOptions): ReplicaProcess {
  const child = options.sandbox.spawn(command, args, {
    jail: options.jail,
    stdio: ["ignore", "pipe", "pipe", ...Array<"pipe">(options.extraPipes ?? 0).fill("pipe")],
    cgroup: options.cgroup,
    networkGate: options.networkGate,
  });
  let spawnError: string | undefined;
  child.once("error", (error) => (spawnError = error.message));
  const exited = new Promise<ProcessExit>((resolve) => {
    child.once("close", (code, signal) => {
      const reason = spawnError ?? (signal ? `signal ${signal}` : `exit code ${code}`);
      // Read before the cgroup is removed: the count is the only sign that the memory limit killed it.
      const outOfMemory = options.cgroup?.oomKilled() ?? false;
      if (outOfMemory) {
        options.logger.warn({ app: options.label, pid: child.pid }, "replica killed at its memory limit");
      }
      const limit = memoryText(options.cgroup?.limits.memoryBytes ?? 0);
      resolve({ reason: outOfMemory ? `killed at its memory limit of ${limit}, ${reason}` : reason, outOfMemory });
    });
  });
  const tail: string[] = [];
  for (const stream of ["stdout", "stderr"] as const) {
    child[stream]!.setEncoding("utf8").on("data", (text: string) => {
      options.logger.info({ app: options.label, pid: child.pid, stream, text }, "worker output");
      for (const line of text.split("\n")) if (line.trim()) tail.push(line.slice(0, TAIL_LINE_CHARS));
      tail.splice(0, tail.length - TAIL_LINES);
    });
  }
  return { child, exited, lastOutput: () => [...tail] };
}

/**
 * Stops a replica's process: `ask()` asks it to stop (a signal, or closing its pipe), its whole group is
 * killed after `graceMs` if it has not exited, and once it has, whatever it left behind in its group too.
 */
export async function stopReplicaProcess(
  replica: { child: ChildProcess; exited: Promise<unknown> },
  options: { graceMs: number; ask(): void },
): Promise<void> {
  const { child } = replica;
  options.ask();
  const timer = setTimeout(() => signalGroup(child, "SIGKILL"), options.graceMs);
  await replica.exited;
  clearTimeout(timer);
  signalGroup(child, "SIGKILL");
}
