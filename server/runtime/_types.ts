/** The runtime's public types (re-exported by mod.ts): its options, a call, what it tells of apps. */
import type { Socket } from "node:net";
import type { AbortSignalLike } from "../abort/mod.ts";
import type { AppConfig } from "./_app_config.ts";
import type { AppSource, DeployedApp, UnservedApp } from "./_app_registry.ts";
import type { DriverFilesOptions, Gpu } from "../gpus/mod.ts";
import type { HardwareNeed } from "./_host_budget.ts";
import type { Logger } from "../log.ts";
import type { CallOutcome, HttpCall } from "./_outcome.ts";
import type { BatchReport, OutputLine, PythonReplica } from "./_python_replica.ts";
import type { CallableReplica } from "./_replica.ts";
import type { Capacity, Lease, ReplicaGpus, ReplicaStates } from "./_replica_pool.ts";
import type { Cgroups, Sandbox } from "../sandbox/mod.ts";
import type { ReplicaVolumes } from "./_replica_jail.ts";
import type { HeldSeat } from "./_seat_book.ts";
import type WebSocket from "ws";

/** One WebSocket connection to open to an app. */
export interface WebSocketRequest {
  projectId: string;
  app: string;
  /** The path after the app (percent-encoding kept, no leading slash) and the query string to pass (no `?`). */
  path: string;
  query: string;
  /** The run's id, sent as `X-Request-Id`. */
  runId: string;
  /** The subprotocols the caller offered. */
  protocols: string[];
  /** Other headers of the caller's that reach the app. */
  headers: Record<string, string>;
  /** The largest message the app may send, in bytes. */
  maxPayload: number;
  /** Aborting stops waiting for a slot or for the handshake (the caller went away). */
  signal?: AbortSignalLike;
  /** Told the deployment whose replica takes the connection (never for an app of the apps folder). */
  onDeployment?(deploymentId: string): void;
}

/** An open WebSocket to an app's replica, holding one of its slots until `release()`. */
export interface AppWebSocket {
  /** The `ws` client connected to the app's server. */
  socket: WebSocket;
  /** The app's `response_grace_period`: the longest the connection may stay open. */
  graceMs: number;
  /** Resolves when the replica's process is gone. */
  replicaGone: Promise<void>;
  /** The replica's memory limit when the kernel killed it there; undefined otherwise. */
  oomLimit(): number | undefined;
  /** Frees the slot (once; later calls are ignored). */
  release(): void;
  /**
   * Opened on another host of the cluster (issue 47): a 1011 close from it is its replica failing there,
   * recorded here as the run's `upstream_error`.
   */
  remote?: boolean;
}

/** An app's seat on this host (issue 31): `project/app` and the seat's number. */
export interface SeatRef {
  projectId: string;
  appId: string;
  seat: number;
}

/** A slot reserved with `tryAcquireSlot`: pass it to `invoke`, or `release()` it if unused. */
export type SlotLease = Lease<CallableReplica>;

/** One call to run. */
export interface InvokeRequest {
  projectId: string;
  app: string;
  functionName: string;
  /** The function's keyword arguments (the request body). */
  input: Record<string, unknown>;
  /**
   * `input` as the JSON text the caller sent, forwarded to the function as is (so 2^60 and 1e400 reach
   * Python as Python reads them); without it `input` is serialised.
   */
  inputJson?: string;
  /** A custom runtime's route called by another method than POST: passed to the app as HTTP. */
  http?: HttpCall;
  /** The run's id (the runs module makes them: `newRunId()`); passed to a `run_id` parameter and sent as `X-Request-Id` upstream. */
  runId: string;
  /** Aborting interrupts the call: it is cancelled in the worker, whose process is replaced if it cannot stop. */
  signal?: AbortSignalLike;
  /** A slot reserved with `tryAcquireSlot`; without it the call waits in the app's queue. */
  lease?: SlotLease;
  /**
   * Told the deployment whose replica takes the call, once its replica is ready and before the function
   * runs; never for an app of the apps folder.
   */
  onDeployment?(deploymentId: string): void;
}

/** What a caller may know about an app before calling it. */
export interface AppSettings {
  runtime: "python" | "custom";
  /** How long one call may run before it fails with `timeout` (the app's `response_grace_period`). */
  responseGracePeriodMs: number;
  maxReplicas: number;
  /**
   * Calls one replica takes at once: `replica_concurrency`, times twice the largest batch `max_size` when
   * the app has batched functions (a batch is one slot; see `_batch_config.ts`).
   */
  replicaConcurrency: number;
}

/** What the runtime knows of one app on this process. */
export interface AppInfo {
  projectId: string;
  name: string;
  source: AppSource;
  /** Its settings; undefined when its `runplane.toml` does not load (see `error`). */
  config?: AppConfig;
  error?: string;
  /** Replicas of every version of the app still running, by state. */
  replicas: ReplicaStates;
  /** The GPUs each of its replicas holds on this host (replicas without GPUs are left out). */
  gpus: ReplicaGpus[];
}

/** Options of `createRuntime`. */
export interface RuntimeOptions {
  logger: Logger;
  /** Calls that may wait per app before 429. */
  queueLimit: number;
  /** How often app folders are checked for changes. */
  pollIntervalMs?: number;
  /**
   * The deployments this process serves, read at every reload (call `reload()` after a change); an app
   * of the apps folder with the same name wins over a deployed one.
   */
  deployedApps?(): DeployedApp[];
  /**
   * The deployed apps no deployment serves (read with `deployedApps`): their calls get 503
   * `app-unavailable` naming the failed deployment, not 404.
   */
  unservedApps?(): UnservedApp[];
  /** Told every line a Python function writes during a call (the run's log). */
  onOutput?(line: OutputLine): void;
  /** Told each batch of a batched function that left for the function (`app` is `project/app`). */
  onBatch?(app: string, batch: BatchReport): void;
  /** Jails the replicas; without it they run unjailed (with an environment built from scratch all the same). */
  sandbox?: Sandbox;
  /** Limits each replica to its `[hardware]` (memory, CPU) and the pids limit; without it, nothing is limited. */
  cgroups?: Cgroups;
  /**
   * The host's budget (RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY): each replica of an app with processes
   * reserves its `[hardware]` and starts only if that fits. Unbounded without it.
   */
  host?: HardwareNeed;
  /**
   * The host's GPUs (nvidia-smi's, or RUNPLANE_GPUS): each replica of an app with `gpu_count = N` holds N
   * of them (of its `compute` model) that no other replica holds, and waits like one that does not fit
   * when too few are free. None without it.
   */
  gpus?: readonly Gpu[];
  /** Where the GPUs' device nodes are found (default `/dev`; tests point it at fake ones). */
  gpuDeviceDir?: string;
  /** Where the GPU driver's libraries and nvidia-smi are found, for a GPU replica in an image. */
  gpuDriver?: DriverFilesOptions;
  /** Fork Python replicas from a template per app version (RUNPLANE_FORK_REPLICAS); default true. */
  forkReplicas?: boolean;
  /** This host's project volumes (issue 48); without them an app with `[volumes]` does not start here. */
  volumes?: ReplicaVolumes;
  /** The most replicas one project's apps may ask for, `max_replicas` summed (RUNPLANE_PROJECT_REPLICA_LIMIT). */
  projectReplicaLimit?: number;
  /**
   * The project's secrets for its replicas' environment, and a fingerprint that changes with them (a
   * change replaces the project's replicas at the next `reload()`).
   */
  projectEnvironment?(projectId: string): Promise<ProjectEnvironment>;
  /**
   * Deployed apps' `[runtime.custom] url`: without `allowed` (RUNPLANE_ALLOW_EXTERNAL_RUNTIMES) such an
   * app does not load; with it, every call is checked by the webhooks' destination guard as it connects
   * (`allowPrivate`: RUNPLANE_WEBHOOK_ALLOW_PRIVATE). Apps of the apps folder are the operator's own and
   * are not checked. Default: refused.
   */
  externalRuntimes?: ExternalRuntimeOptions;
  /**
   * Count replicas cluster-wide (issue 31): an app runs here only as many replicas as it holds seats
   * (`addSeat`), and keeps warm those of its seats below `min_replicas`; without a seat its calls get a
   * 503 `no-seat` at once instead of waiting. Default: every app may run its `max_replicas` here.
   */
  seated?: boolean;
  /** Told when an app's replicas change load: a call started or ended, a replica ready or gone (seated). */
  onLoadChange?(): void;
  /**
   * Extra channels of every Python replica (`RUNPLANE_WORKERS` > 1): `count` more sockets each, handed
   * to the host's workers so that they call it directly (`tryChannelSlot`); told once a replica's
   * process has them. None without it.
   */
  replicaChannels?: { count: number; onChannels(replica: PythonReplica, channels: readonly Socket[]): void };
}

/**
 * A free slot on a ready Python replica, held for a call another process of the host makes on one of
 * the replica's channels: `release()` once that call is over.
 */
export interface ChannelSlot {
  replica: PythonReplica;
  /** The deployment the replica serves, when the app was deployed (not of the apps folder). */
  deploymentId?: string;
  /** The app's `response_grace_period`. */
  graceMs: number;
  /** The app's `replica_concurrency`. */
  concurrency: number;
  release(): void;
}

/** How the runtime treats deployed apps' external runtimes (`RuntimeOptions.externalRuntimes`). */
export interface ExternalRuntimeOptions {
  allowed: boolean;
  allowPrivate: boolean;
}

/** A project's secrets as its replicas see them. */
export interface ProjectEnvironment {
  env: Record<string, string>;
  fingerprint: string;
}

/** Options of `Runtime.stage`. */
export interface StageOptions {
  /** Stops what was started (its `stage` rejects then): the server is stopping. */
  signal?: AbortSignal;
}

/** A deployed app's version started by `stage`, not served yet. */
export interface StagedVersion {
  /**
   * Why it was not checked, when it was not: no replica of it fits this host now (its `[hardware]` or
   * GPUs are taken); its first call loads it then. Undefined once a replica of it serves.
   */
  skipped?: string;
  /** Stops what was started for it, unless a reload serves it since (it took the replicas over). */
  release(): Promise<void>;
}

/** Deployed apps and their replicas. */
export interface Runtime {
  /** Loads every app and starts watching the apps folder. */
  start(): Promise<void>;
  /**
   * Runs a call. Resolves once the function answered with a result, or once it started a stream (read
   * `items` to the end, or stop reading to close the generator). Rejects with `RunFailure` when the run
   * failed, or a `ProblemError` when it could not run (404, 429, 503).
   */
  invoke(request: InvokeRequest): Promise<CallOutcome>;
  /**
   * Opens a WebSocket to a custom runtime's replica (issue 47), holding one of its slots (as a call does)
   * until the returned connection's `release()`. Rejects like `invoke` when it cannot (400 for an app
   * without a server of its own, 404, 429, 503), or with a `RunFailure` when the app refused the upgrade.
   */
  connectWebSocket(request: WebSocketRequest): Promise<AppWebSocket>;
  /** Reserves a slot of the app without queueing; null when every slot is busy. */
  tryAcquireSlot(projectId: string, app: string): SlotLease | null;
  /**
   * A free slot of the app's current version on a ready Python replica, now, without queueing, starting
   * or loading anything; null otherwise (the call then goes the way `invoke` takes).
   */
  tryChannelSlot(projectId: string, app: string): ChannelSlot | null;
  /** The app's slots and queue. */
  capacity(projectId: string, app: string): Capacity;
  /** The app's runtime and limits; throws like `invoke` for a missing or broken app. */
  appSettings(projectId: string, app: string): AppSettings;
  /** Like `appSettings`, but first loads an app deployed since the last poll, as `invoke` does. */
  findApp(projectId: string, app: string): Promise<AppSettings>;
  /** Settles once every app's `min_replicas` replicas are ready or failed to start. */
  warm(): Promise<void>;
  /** Replicas per app (`project/app`) by state, retired versions still finishing calls included. */
  replicaStates(): Array<{ app: string } & ReplicaStates>;
  /** Replicas each app's live pools have started (a count that grows; a retired version's leaves with it). */
  replicaStarts(): Array<{ app: string; starts: number }>;
  /**
   * Re-reads the apps folder and the deployed apps (it is also polled); resolves once a reload that
   * began after this call has ended. Reloads run one at a time, so an older read never replaces a newer one.
   */
  reload(): Promise<void>;
  /**
   * Starts a deployed app's version beside the one serving, and resolves once it serves: a replica of it
   * (or its template) imported main.py, or its custom server's ready endpoint (else its health check)
   * answered, in the app's jail and under its limits; one replica even with `min_replicas = 0` (it then
   * stops after the cooldown). Rejects with `AppStartError` (the traceback, or the server's last output, in
   * `output`) when it cannot. A later `reload()` that serves it takes over its replicas; `release()` the rest.
   */
  stage(app: DeployedApp, options?: StageOptions): Promise<StagedVersion>;
  /** Every app loaded (or failed to load), optionally of one project, sorted by name. */
  apps(projectId?: string): AppInfo[];
  /**
   * Why a version of app `app` with `config` would not be served here (its replicas could never fit the
   * host's budget, or its project's `max_replicas` would pass RUNPLANE_PROJECT_REPLICA_LIMIT, counted
   * with the project's other apps as served now); undefined when it would.
   */
  admissionProblem(projectId: string, app: string, config: AppConfig): string | undefined;
  /** The host's budget and what live replicas reserve of it; `gpus` counts the host's GPUs and those held. */
  hostCapacity(): { total: HardwareNeed; reserved: HardwareNeed; gpus: { total: number; held: number } };
  /** Per app (`project/app`), replicas it would start now but the host has no room for. */
  waitingForCapacity(): Array<{ app: string; replicas: number }>;
  /** Whether one more replica of the app would fit this host's budget now (seated runtimes place by it). */
  canPlace(projectId: string, app: string): boolean;
  /** Seated: the app may run one more replica here (a seat claimed in the store). False for an app not served. */
  addSeat(ref: SeatRef): boolean;
  /** Seated: the app lost these seats (another host took them over); replicas past its seats stop. */
  dropSeats(refs: readonly SeatRef[]): void;
  /** Seated: every seat held, with its replica's state and calls (for the cluster's view). */
  heldSeats(): HeldSeat[];
  /**
   * Seated: removes and returns the seats no replica needs any more (their replicas stopped after the
   * cooldown, failed, or the app is gone); the caller releases them in the store.
   */
  spareSeats(): SeatRef[];
  /**
   * Tells `listener` each batch of a batched function that leaves for one of this process's replicas
   * (issue 49); absent where the runtime runs no replica itself (a worker's view of its supervisor's).
   */
  listenBatches?(listener: (app: string, batch: BatchReport) => void): void;
  /** Stops watching and stops every replica. */
  close(): Promise<void>;
}
