/**
 * The process behind a Python replica, whichever way it began: a cold start (`startColdWorker`: its own
 * jail running `_worker.py`) or a fork of the app's template (`_replica_template.ts`). The replica
 * drives either through the same two streams and the same stop and kill.
 */
import type { Socket } from "node:net";
import type { Readable, Writable } from "node:stream";
import type { Logger } from "../log.ts";
import type { JailSpec, ReplicaCgroup, Sandbox } from "../sandbox/mod.ts";
import type { BatchSpecs } from "./_batch_config.ts";
import { BOOTSTRAP, currentHarness, type Harness } from "./_harness_bytecode.ts";
import { type ProcessExit, signalGroup, spawnInOwnGroup, stopReplicaProcess } from "./_process_group.ts";

/** A Python worker's process as its replica sees it. */
export interface WorkerProcess {
  /** Requests to the worker (the worker protocol's server side). */
  readonly requests: Writable;
  /** The worker's messages. */
  readonly messages: Readable;
  /** The host's pid of the process (or of what the server started for it), once known. */
  readonly pid: number | undefined;
  /** How it began: `cold` (a process of its own) or `fork` (forked from the app's template). */
  readonly origin: "cold" | "fork";
  /**
   * Its extra channels (`_worker.py`'s `--channels`): one socket each, the worker protocol both ways,
   * for a host's front-door processes to call it directly; none unless asked for.
   */
  readonly channels: readonly Socket[];
  /** Resolves once the process has exited and its streams closed. */
  readonly exited: Promise<ProcessExit>;
  /** Whether the process has exited (its streams may still be draining). */
  hasExited(): boolean;
  /** Kills the process and whatever it started, now. */
  kill(): void;
  /**
   * For a stuck cancelled call, on a channel of a replica that other processes call too: kills it only
   * when that call is the only one in it (its owner counts them), else lets the call run out.
   */
  killIfAlone?(): void;
  /** Ends the requests (the worker exits), then kills it after `graceMs` if it has not. */
  stop(graceMs: number): Promise<void>;
}

/**
 * What `_worker.py` is told on its command line: the app, its concurrency, its preload, its mode. An
 * `unjailed` template makes its forks die with it itself (jailed, its pid namespace does). The harness is
 * started through `BOOTSTRAP` (its bytecode is then cached: `_harness_bytecode.ts`).
 */
export function workerArgs(
  appDir: string,
  options: {
    harness: Harness;
    concurrency: number;
    preload: string[];
    batch?: BatchSpecs;
    template?: boolean;
    unjailed?: boolean;
    channelFds?: number[];
    /** The descriptor of its network gate, read before the preload and main.py (`SandboxSpawnOptions.networkGate`). */
    networkFd?: number;
  },
) {
  const batch = options.batch && Object.keys(options.batch).length ? [`--batch=${JSON.stringify(options.batch)}`] : [];
  return [
    "-u",
    "-c",
    BOOTSTRAP,
    options.harness.file,
    appDir,
    String(options.concurrency),
    ...(options.preload.length ? [`--preload=${options.preload.join(",")}`] : []),
    ...(options.channelFds?.length ? [`--channels=${options.channelFds.join(",")}`] : []),
    ...(options.networkFd !== undefined ? [`--network-fd=${options.networkFd}`] : []),
    ...batch,
    ...(options.template ? ["--template"] : []),
    ...(options.template && options.unjailed ? ["--unjailed"] : []),
  ];
}

/** The jail of a worker or template: the replica's, plus the harness itself and unbuffered output. */
export function workerJail(jail: JailSpec, harness: Harness): JailSpec {
  return {
    ...jail,
    readOnly: [...(jail.readOnly ?? []), harness.bind],
    env: { ...jail.env, PYTHONDONTWRITEBYTECODE: "1", PYTHONUNBUFFERED: "1" },
  };
}

/** What every Python process of an app version runs with (a replica or its template). */
export interface WorkerSpec {
  appDir: string;
  label: string;
  python: string;
  concurrency: number;
  /** `[runtime] preload`: imported before main.py. */
  preload: string[];
  /** `[functions.<name>] batch`: the batched functions, grouped in the worker. */
  batch?: BatchSpecs;
  sandbox: Sandbox;
  jail: JailSpec;
  logger: Logger;
}

/** Options of `startColdWorker`. */
export interface ColdWorkerOptions extends WorkerSpec {
  cgroup?: ReplicaCgroup;
  /** How many extra channels it serves (see `WorkerProcess.channels`); default none. */
  channels?: number;
}

/** The first descriptor of a cold worker's extra channels: after fd 3 (requests) and fd 4 (messages). */
const FIRST_CHANNEL_FD = 5;

/**
 * A worker's or template's protocol pipes (fd 3 and 4), its `channels` (fd 5 on) and its network gate,
 * the last: the interpreter and the harness's imports run while the jail's network is attached, and the
 * harness waits on the gate only before the preload and main.py, which may need the network.
 */
export function workerDescriptors(channels: number): { channelFds: number[]; networkFd: number; extraPipes: number } {
  const channelFds = Array.from({ length: channels }, (_, i) => FIRST_CHANNEL_FD + i);
  return { channelFds, networkFd: FIRST_CHANNEL_FD + channels, extraPipes: 3 + channels };
}

/** Starts `_worker.py` in a jail of its own: the whole import is paid again (a cold start). */
export function startColdWorker(options: ColdWorkerOptions): WorkerProcess {
  const { channelFds, networkFd, extraPipes } = workerDescriptors(options.channels ?? 0);
  const harness = currentHarness();
  const { child, exited } = spawnInOwnGroup(
    options.python,
    workerArgs(options.appDir, {
      harness,
      concurrency: options.concurrency,
      preload: options.preload,
      batch: options.batch,
      channelFds,
      networkFd,
    }),
    {
      sandbox: options.sandbox,
      jail: workerJail(options.jail, harness),
      // Each a socket pair (libuv's pipes are), so one descriptor carries a channel both ways.
      extraPipes,
      logger: options.logger,
      label: options.label,
      cgroup: options.cgroup,
      networkGate: networkFd,
    },
  );
  let ended = false;
  child.once("exit", () => (ended = true));
  const requests = child.stdio[3] as Writable;
  // A write after the worker died must not crash the server.
  requests.on("error", () => undefined);
  const channels = channelFds.map((fd) => child.stdio[fd] as Socket);
  for (const channel of channels) channel.on("error", () => undefined);
  return {
    requests,
    messages: child.stdio[4] as Readable,
    channels,
    get pid() {
      return child.pid;
    },
    origin: "cold",
    exited,
    hasExited: () => ended,
    kill: () => signalGroup(child, "SIGKILL"),
    stop: (graceMs) => stopReplicaProcess({ child, exited }, { graceMs, ask: () => requests.end() }),
  };
}
