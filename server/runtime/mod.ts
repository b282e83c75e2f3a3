/**
 * The runtime: deployed apps and their warm replicas. `invoke` runs one call of an app's function and
 * resolves with a JSON result or a stream of items; failures are typed (`RunFailure`, or a
 * `ProblemError` for a missing app or function, a full queue, an app that failed to load). Free of HTTP,
 * so the synchronous handler and a durable async dispatcher call it the same way.
 */
import type { Socket } from "node:net";
import type { AbortSignalLike } from "../abort/mod.ts";
import type { AppConfig } from "./_app_config.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import {
  type AppSource,
  type AppVersion,
  type DeployedApp,
  loadApp,
  loadDeployedApp,
  scanApps,
  type UnservedApp,
  unservedVersion,
} from "./_app_registry.ts";
import { CustomProcessReplica } from "./_custom_replica.ts";
import { AppStartError, RunFailure } from "./_failures.ts";
import type { CallOutcome } from "./_outcome.ts";
import { type OutputLine, PythonReplica } from "./_python_replica.ts";
import type { CallableReplica } from "./_replica.ts";
import type { Gpu } from "../gpus/mod.ts";
import {
  type Capacity,
  type Lease,
  type ReplicaGpus,
  type ReplicaGrant,
  type ReplicaLimits,
  ReplicaPool,
  type ReplicaStates,
} from "./_replica_pool.ts";
import { StagedPools } from "./_staged_pools.ts";
import { replicaGpuJail, replicaJail } from "./_replica_jail.ts";
import { UrlUpstream } from "./_url_upstream.ts";
import { type Cgroups, disabledCgroups, type ReplicaCgroup, type Sandbox, unjailedSandbox } from "../sandbox/mod.ts";
import { FailedReplica } from "./_failed_replica.ts";
import { TemplateKeeper } from "./_template_keeper.ts";
import { startColdWorker } from "./_worker_process.ts";
import { type HardwareNeed, HostBudget } from "./_host_budget.ts";
import { type HeldSeat, SeatBook, splitKey } from "./_seat_book.ts";

export {
  type AppConfig,
  AppConfigError,
  type AppConfigOptions,
  DEFAULT_HARDWARE,
  type Hardware,
  HARDWARE_BOUNDS,
  MAX_GRACE_PERIOD_SECONDS,
  parseAppConfig,
} from "./_app_config.ts";
export { envNameProblem } from "./_app_env.ts";
export type { AppSource, DeployedApp, UnservedApp } from "./_app_registry.ts";
export { pipEntryProblem } from "./_dependency_rules.ts";
export {
  AppStartError,
  failureFromRunError,
  RunFailure,
  type RunErrorType,
  type RunFailureOptions,
} from "./_failures.ts";
export type { HardwareNeed } from "./_host_budget.ts";
export type { CallOutcome, StreamItem } from "./_outcome.ts";
export { type ProcessExit, signalGroup } from "./_process_group.ts";
export { type OutputLine, PythonReplica, type ReplicaExit } from "./_python_replica.ts";
export type { CallableReplica, ReplicaCall } from "./_replica.ts";
export { interpreterHome } from "./_replica_jail.ts";
export type { Capacity, ReplicaGpus, ReplicaStates } from "./_replica_pool.ts";
export type { HeldSeat } from "./_seat_book.ts";
export type { WorkerProcess } from "./_worker_process.ts";

/** An app's seat on this host (issue 31): `project/app` and the seat's number. */
export interface SeatRef {
  projectId: string;
  appId: string;
  seat: number;
}

/**
 * A seated runtime's answer to a call of an app that holds no seat here (issue 31): the call may run on
 * another host, or here once a seat is claimed. A 503 for a caller that gets it.
 */
export class NoSeatError extends ProblemError {
  constructor(app: string) {
    super("service-unavailable", `No replica of ${app} may run on this host now; retry`, {
      headers: { "Retry-After": "1" },
    });
  }
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
  /** Fork Python replicas from a template per app version (RUNPLANE_FORK_REPLICAS); default true. */
  forkReplicas?: boolean;
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

const NO_SECRETS: ProjectEnvironment = { env: {}, fingerprint: "" };

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
  /** Stops watching and stops every replica. */
  close(): Promise<void>;
}

interface LiveApp {
  version: AppVersion;
  secrets: ProjectEnvironment;
  pool?: ReplicaPool<CallableReplica>;
  /** The loaded version, when `version` is its refusal (see `admissionProblem`): checked again at each reload. */
  refused?: AppVersion;
}

function label(version: AppVersion): string {
  return `${version.projectId}/${version.name}`;
}

type PoolOptions = RuntimeOptions & {
  sandbox: Sandbox;
  cgroups: Cgroups;
  budget: HostBudget;
  seats: SeatBook;
  /**
   * The Python replicas among the pools' replicas, by the replica as its pool holds it: those a host's
   * workers may call on their channels (`tryChannelSlot`).
   */
  pythonReplicas: WeakMap<CallableReplica, PythonReplica>;
  /** What the pool may run, in place of the app's scaling (or its seats). */
  limits?: ReplicaLimits;
};

/**
 * The replica of `name` that is not started because its cgroup could not be made (`error`): its calls get
 * 503 with why.
 */
function cgroupFailure(name: string, error: unknown, logger: Logger): FailedReplica {
  logger.error({ err: error, app: name }, "the replica's cgroup could not be made; the replica does not start");
  return new FailedReplica(
    new ProblemError(
      "app-unavailable",
      `${name}: its replica's cgroup (its memory and CPU limits) could not be made: ${(error as Error).message}`,
    ),
  );
}

function createPool(
  version: AppVersion,
  secrets: ProjectEnvironment,
  options: PoolOptions,
): ReplicaPool<CallableReplica> | undefined {
  const { config } = version;
  if (!config) return undefined;
  const name = label(version);
  const { logger, sandbox } = options;
  const versionJail = replicaJail({ ...version, config }, secrets.env);
  const worker = {
    appDir: version.dir,
    label: name,
    python: config.python,
    concurrency: config.replicaConcurrency,
    preload: config.preload,
    logger,
    sandbox,
    // A replica without GPUs (a template's forks among them) sees none: CUDA_VISIBLE_DEVICES is empty.
    jail: replicaGpuJail(versionJail, [], { deviceDir: options.gpuDeviceDir }),
  };
  // An app with GPUs cold-starts: a fork shares its template's jail, and a jail binds only the device
  // nodes of the GPUs its own replica holds (issue 29), which a template made before the grant cannot.
  const keeper = config.runtime === "python" && options.forkReplicas !== false && config.hardware.gpuCount === 0
    ? new TemplateKeeper({
      ...worker,
      keep: config.minReplicas > 0,
      cooldownMs: config.cooldownMs,
      // Its memory counts against the host's; it runs nothing, so it reserves no core.
      reserve: () => options.budget.tryReserve({ cpu: 0, memoryBytes: config.hardware.memoryBytes }),
      cgroup: () => options.cgroups.create(`${name} template`, limitsOf(config)) ?? undefined,
    })
    : undefined;
  function startProcess(cgroup: ReplicaCgroup | undefined, grant: ReplicaGrant): PythonReplica | CustomProcessReplica {
    const jail = replicaGpuJail(versionJail, grant.gpus, { deviceDir: options.gpuDeviceDir });
    const custom = config!.custom;
    if (custom?.kind === "process") {
      const { prepare } = version;
      return new CustomProcessReplica({
        appDir: version.dir,
        label: name,
        logger,
        sandbox,
        jail,
        cgroup,
        prepare,
        ...custom,
      });
    }
    const channels = options.replicaChannels?.count ?? 0;
    const cold = () => startColdWorker({ ...worker, jail, cgroup, channels });
    const replica = new PythonReplica({
      ...worker,
      jail,
      onOutput: options.onOutput,
      cgroup,
      // A deployment this host has not built yet is built before the replica's process starts.
      prepare: version.prepare,
      start: keeper ? () => keeper.start({ cgroup, channels }, cold) : async () => cold(),
      onChannels: options.replicaChannels?.onChannels,
    });
    options.pythonReplicas.set(replica, replica);
    return replica;
  }
  function spawn(grant: ReplicaGrant): CallableReplica {
    const custom = config!.custom;
    if (custom?.kind === "url") {
      const allowPrivate = options.externalRuntimes?.allowPrivate ?? false;
      return new UrlUpstream(custom.url, { guard: version.source === "deployment" ? { allowPrivate } : undefined });
    }
    let cgroup: ReplicaCgroup | null;
    try {
      cgroup = options.cgroups.create(name, limitsOf(config!));
    } catch (error) {
      return cgroupFailure(name, error, logger);
    }
    const replica = startProcess(cgroup ?? undefined, grant);
    if (cgroup) {
      void replica.exited.then(() => cgroup.remove()).then((removed) => {
        if (!removed) logger.warn({ app: name, cgroup: cgroup.name }, "a replica's cgroup could not be removed");
      });
    }
    return replica;
  }
  const { cpu, memoryBytes, gpuCount, compute } = config.hardware;
  const need = { cpu, memoryBytes, gpuCount, compute };
  const limits = options.limits ?? (options.seated ? options.seats.limits(name, config.minReplicas) : config);
  return new ReplicaPool<CallableReplica>({
    label: name,
    // An external url runs nothing on this host.
    budget: config.custom?.kind === "url" ? undefined : { host: options.budget, need },
    minReplicas: limits.minReplicas,
    maxReplicas: limits.maxReplicas,
    slotsPerReplica: config.replicaConcurrency,
    cooldownMs: config.cooldownMs,
    queueLimit: options.queueLimit,
    spawn,
    logger,
    onDetach: () => void keeper?.close(),
    onChange: options.onLoadChange,
  });
}

function limitsOf(config: AppConfig): { cpu: number; memoryBytes: number } {
  return { cpu: config.hardware.cpu, memoryBytes: config.hardware.memoryBytes };
}

/** Creates the runtime over `appsDir`; call `start()` before serving. */
export function createRuntime(appsDir: string, runtimeOptions: RuntimeOptions): Runtime {
  const options = {
    ...runtimeOptions,
    sandbox: runtimeOptions.sandbox ?? unjailedSandbox(),
    cgroups: runtimeOptions.cgroups ?? disabledCgroups(),
    budget: new HostBudget(runtimeOptions.host ?? { cpu: Infinity, memoryBytes: Infinity }, {
      gpus: runtimeOptions.gpus,
    }),
    seats: new SeatBook(),
    pythonReplicas: new WeakMap<CallableReplica, PythonReplica>(),
  };
  const replicaLimit = runtimeOptions.projectReplicaLimit ?? Infinity;
  const apps = new Map<string, LiveApp>();
  const retired = new Set<ReplicaPool<CallableReplica>>();
  const staged = new StagedPools<CallableReplica>();
  const logger = options.logger;
  let timer: ReturnType<typeof setInterval> | undefined;
  let polling: Promise<void> | undefined;
  let closed = false;
  const allowExternalRuntimes = options.externalRuntimes?.allowed ?? false;

  /** Each project's secrets, read once per reload. */
  function secretsReader(): (projectId: string) => Promise<ProjectEnvironment> {
    const read = new Map<string, Promise<ProjectEnvironment>>();
    return (projectId) => {
      let found = read.get(projectId);
      if (!found) {
        found = options.projectEnvironment?.(projectId) ?? Promise.resolve(NO_SECRETS);
        read.set(projectId, found);
      }
      return found;
    };
  }

  function admissionProblem(projectId: string, app: string, config: AppConfig): string | undefined {
    // Seated, an app whose replicas can never fit this host is still served here: its calls go to hosts
    // where they fit (`canPlace` is false here).
    if (config.custom?.kind !== "url" && !options.seated) {
      const never = options.budget.neverFits(config.hardware);
      if (never) return `${never}: no replica of it could ever start here; lower it`;
      const { gpuCount: count, compute } = config.hardware;
      const noGpus = options.budget.gpus.neverFits({ count, compute: compute === "CPU" ? undefined : compute });
      if (noGpus) return noGpus;
    }
    let asked = config.maxReplicas;
    for (const live of apps.values()) {
      const { version } = live;
      if (version.projectId === projectId && version.name !== app && version.config) {
        asked += version.config.maxReplicas;
      }
    }
    if (asked <= replicaLimit) return undefined;
    return `project ${projectId}'s apps would ask for ${asked} replicas in all (scaling.max_replicas summed over its apps), more than this server's RUNPLANE_PROJECT_REPLICA_LIMIT of ${replicaLimit}; lower max_replicas, or remove an app`;
  }

  /** `version`, or its refusal when it may not be served here (see `admissionProblem`). */
  function admitted(version: AppVersion): { version: AppVersion; refused?: AppVersion } {
    if (!version.config) return { version };
    const problem = admissionProblem(version.projectId, version.name, version.config);
    if (!problem) return { version };
    const { config: _, ...base } = version;
    return { version: { ...base, error: problem }, refused: version };
  }

  function install(loaded: AppVersion, secrets: ProjectEnvironment): LiveApp {
    const { version, refused } = admitted(loaded);
    if (version.error) logger.error({ app: label(version), error: version.error }, "app failed to load");
    else logger.info({ app: label(version), runtime: version.config?.runtime }, "app loaded");
    // A version `stage` started is served by what it started (a warm replica, its template).
    const taken = staged.take({ version, secrets: secrets.fingerprint });
    if (taken && options.seated) taken.setLimits(options.seats.limits(label(version), version.config!.minReplicas));
    const pool = closed ? undefined : (taken ?? createPool(version, secrets, options));
    const live = { version, secrets, refused, pool };
    apps.set(label(version), live);
    return live;
  }

  async function stage(app: DeployedApp, stageOptions: StageOptions = {}): Promise<StagedVersion> {
    const { version } = admitted(await loadDeployedApp(app, { allowExternalRuntimes }));
    const secrets = await secretsReader()(app.projectId);
    const name = label(version);
    if (!version.config) throw new AppStartError(`${name}: ${version.error}`);
    if (closed) throw new AppStartError(`${name}: the server is closing`);
    const { config } = version;
    const noRoom = `no replica of it fits this host now (its [hardware] or GPUs are taken): the first call loads it`;
    if (config.custom?.kind !== "url" && !options.budget.fits(config.hardware)) {
      return { skipped: noRoom, release: () => Promise.resolve() };
    }
    // Seated, the check runs a replica whether or not this host holds a seat of the app; a reload that
    // serves the version gives its pool the seats' limits (stopping that replica if it holds none).
    const seats = options.seated ? options.seats.limits(name, config.minReplicas) : undefined;
    const limits = seats && { ...seats, maxReplicas: Math.max(1, seats.maxReplicas) };
    const pool = createPool(version, secrets, { ...options, limits })!;
    const release = staged.add({ version, secrets: secrets.fingerprint }, pool);
    const lease = pool.tryAcquire();
    if (!lease) {
      await release();
      return { skipped: noRoom, release };
    }
    // Stopping the replica makes its `ready` reject: the caller does not wait for a slow import.
    const { signal } = stageOptions;
    const onAbort = () => void release();
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) onAbort();
    try {
      await lease.replica.ready;
    } catch (error) {
      await release();
      if (error instanceof AppStartError || !(error instanceof ProblemError)) throw error;
      throw new AppStartError(error.message);
    } finally {
      signal?.removeEventListener("abort", onAbort);
      // Without min_replicas it is let go after the cooldown, unless a call takes it first.
      lease.release();
    }
    return { release };
  }

  /** Whether `live` is still what `version` with `secrets` gives (a refusal only while it is still refused). */
  function unchanged(live: LiveApp | undefined, version: AppVersion, secrets: ProjectEnvironment): boolean {
    if (live?.version.fingerprint !== version.fingerprint || live.secrets.fingerprint !== secrets.fingerprint) {
      return false;
    }
    if (!live.refused) return true;
    return admitted(version).version.error === live.version.error;
  }

  function retire(live: LiveApp): void {
    if (!live.pool) return;
    live.pool.drain();
    retired.add(live.pool);
  }

  // Reloads run one at a time: two at once could finish out of order, and the one that read the
  // deployed apps first would then install the version the other had just replaced.
  let reloadTail: Promise<void> = Promise.resolve();
  let reloadQueued: Promise<void> | undefined;
  function reload(): Promise<void> {
    // A reload not yet begun reads after this call: share it; else queue one after the current one.
    if (reloadQueued) return reloadQueued;
    const round = reloadTail.catch(() => {}).then(() => {
      reloadQueued = undefined;
      return reloadOnce();
    });
    reloadQueued = round;
    reloadTail = round;
    return round;
  }

  async function reloadOnce(): Promise<void> {
    // Unchanged folders (by name, size and time of their files) are not read again.
    // The version as loaded (a refused one's own, not its refusal), so that it is checked again.
    const loaded = (key: string) => apps.get(key)?.refused ?? apps.get(key)?.version;
    const found = await scanApps(appsDir, (projectId, name) => loaded(`${projectId}/${name}`));
    const inFolder = new Set(found.map(label));
    for (const deployed of options.deployedApps?.() ?? []) {
      const key = `${deployed.projectId}/${deployed.name}`;
      if (!inFolder.has(key)) {
        found.push(await loadDeployedApp(deployed, { known: loaded(key), allowExternalRuntimes }));
      }
    }
    const listed = new Set(found.map(label));
    for (const unserved of options.unservedApps?.() ?? []) {
      if (!listed.has(`${unserved.projectId}/${unserved.name}`)) found.push(unservedVersion(unserved));
    }
    const secretsOf = secretsReader();
    const secrets = await Promise.all(found.map((version) => secretsOf(version.projectId)));
    if (closed) return;
    const seen = new Set(found.map(label));
    // Removed apps first: what they asked for no longer counts against their project's limit.
    for (const [key, live] of apps) {
      if (seen.has(key)) continue;
      logger.info({ app: key }, "app removed");
      apps.delete(key);
      retire(live);
    }
    for (const [index, version] of found.entries()) {
      const key = label(version);
      const live = apps.get(key);
      if (unchanged(live, version, secrets[index])) continue;
      if (live) {
        logger.info({ app: key }, "app changed; new calls go to new replicas");
        retire(live);
        // Its own old version does not count against its project's limit.
        apps.delete(key);
      }
      install(version, secrets[index]);
    }
    for (const pool of retired) {
      if (pool.capacity().replicas === 0 && pool.capacity().busy === 0) {
        pool.detach();
        retired.delete(pool);
      }
    }
  }

  function live(
    projectId: string,
    app: string,
  ): LiveApp & { pool: ReplicaPool<CallableReplica>; version: { config: NonNullable<AppVersion["config"]> } } {
    const found = apps.get(`${projectId}/${app}`);
    if (!found) {
      throw new ProblemError(
        "not-found",
        `Project ${projectId} has no app named ${app}; check the name or deploy the app first`,
      );
    }
    if (found.version.error !== undefined || !found.pool) {
      throw new ProblemError(
        "app-unavailable",
        `App ${projectId}/${app} failed to load: ${found.version.error ?? "the server is closing"}`,
      );
    }
    return found as ReturnType<typeof live>;
  }

  /** Every pool with replicas that may still run: current versions' and retired ones'. */
  function livePools(): ReplicaPool<CallableReplica>[] {
    return [...[...apps.values()].flatMap((a) => (a.pool ? [a.pool] : [])), ...retired];
  }

  async function liveOrLoad(projectId: string, app: string) {
    // An app deployed since the last poll is served at once.
    if (!apps.has(`${projectId}/${app}`) && !closed) {
      const named = (d: { projectId: string; name: string }) => d.projectId === projectId && d.name === app;
      const deployed = options.deployedApps?.().find(named);
      const unserved = deployed ? undefined : options.unservedApps?.().find(named);
      const version = (await loadApp(appsDir, projectId, app))
        ?? (deployed ? await loadDeployedApp(deployed, { allowExternalRuntimes }) : undefined)
        ?? (unserved ? unservedVersion(unserved) : undefined);
      const secrets = version ? await secretsReader()(projectId) : NO_SECRETS;
      if (version && !apps.has(label(version))) install(version, secrets);
    }
    return live(projectId, app);
  }

  return {
    async start() {
      await reload();
      timer = setInterval(() => {
        polling ??= reload().catch((error) => logger.error({ err: error }, "reloading apps failed")).finally(
          () => (polling = undefined),
        );
      }, options.pollIntervalMs ?? 500);
      timer.unref();
    },
    reload,
    stage,
    async invoke(request) {
      const app = await liveOrLoad(request.projectId, request.app);
      const { config } = app.version;
      if (options.seated && !request.lease && app.pool.limits.maxReplicas === 0) {
        throw new NoSeatError(label(app.version));
      }
      let lease: SlotLease;
      try {
        lease = request.lease ?? (await app.pool.acquire(request.signal));
      } catch (error) {
        if (request.signal?.aborted) {
          throw new RunFailure("interrupted", "The run was interrupted while it waited for a slot", {
            runId: request.runId,
          });
        }
        throw error;
      }
      try {
        await lease.replica.ready;
      } catch (error) {
        lease.release();
        if (error instanceof ProblemError) throw new ProblemError(error.kind, error.message, { runId: request.runId });
        throw error;
      }
      // The version this call's pool serves: the one it runs on, even if a newer one arrived meanwhile.
      if (app.version.deploymentId !== undefined) request.onDeployment?.(app.version.deploymentId);
      return lease.replica.call({
        runId: request.runId,
        functionName: request.functionName,
        kwargs: request.input,
        kwargsJson: request.inputJson,
        graceMs: config.responseGracePeriodMs,
        signal: request.signal,
        onSettled: () => lease.release(),
      });
    },
    tryAcquireSlot(projectId, app) {
      return live(projectId, app).pool.tryAcquire();
    },
    tryChannelSlot(projectId, app) {
      const found = apps.get(`${projectId}/${app}`);
      if (!found?.pool || found.version.config?.runtime !== "python" || found.version.error !== undefined) return null;
      const lease = found.pool.tryAcquire();
      if (!lease) return null;
      const replica = options.pythonReplicas.get(lease.replica);
      if (!replica || !replica.wasReady || !replica.usable) {
        lease.release();
        return null;
      }
      const { deploymentId } = found.version;
      const { responseGracePeriodMs: graceMs, replicaConcurrency: concurrency } = found.version.config;
      return { replica, deploymentId, graceMs, concurrency, release: lease.release };
    },
    capacity(projectId, app) {
      return live(projectId, app).pool.capacity();
    },
    async warm() {
      await Promise.all([...apps.values()].map((live) => live.pool?.warm()));
    },
    async findApp(projectId, app) {
      await liveOrLoad(projectId, app);
      return this.appSettings(projectId, app);
    },
    appSettings(projectId, app) {
      const { config } = live(projectId, app).version;
      return {
        runtime: config.runtime,
        responseGracePeriodMs: config.responseGracePeriodMs,
        maxReplicas: config.maxReplicas,
        replicaConcurrency: config.replicaConcurrency,
      };
    },
    apps(projectId) {
      const states = new Map(this.replicaStates().map(({ app, ...rest }) => [app, rest]));
      const gpus = new Map<string, ReplicaGpus[]>();
      for (const pool of livePools()) gpus.set(pool.label, [...(gpus.get(pool.label) ?? []), ...pool.gpus()]);
      return [...apps.values()]
        .filter((live) => projectId === undefined || live.version.projectId === projectId)
        .map(({ version }) => ({
          projectId: version.projectId,
          name: version.name,
          source: version.source,
          config: version.config,
          error: version.error,
          replicas: states.get(label(version)) ?? { starting: 0, idle: 0, busy: 0 },
          gpus: gpus.get(label(version)) ?? [],
        }))
        .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    },
    admissionProblem,
    canPlace(projectId, app) {
      const { config } = live(projectId, app).version;
      return config.custom?.kind === "url" || options.budget.fits(config.hardware);
    },
    addSeat(ref) {
      const found = apps.get(`${ref.projectId}/${ref.appId}`);
      if (!found?.pool || !found.version.config) return false;
      options.seats.add(label(found.version), ref.seat);
      found.pool.setLimits(options.seats.limits(label(found.version), found.version.config.minReplicas));
      return true;
    },
    dropSeats(refs) {
      for (const ref of refs) {
        const key = `${ref.projectId}/${ref.appId}`;
        options.seats.remove(key, ref.seat);
        const found = apps.get(key);
        if (found?.pool && found.version.config) {
          found.pool.setLimits(options.seats.limits(key, found.version.config.minReplicas));
        }
      }
    },
    heldSeats() {
      return options.seats.keys().flatMap((key) => options.seats.states(key, apps.get(key)?.pool?.loads() ?? []));
    },
    spareSeats() {
      return options.seats.keys().flatMap((key) => {
        const found = apps.get(key);
        const [projectId, appId] = splitKey(key);
        const pool = found?.pool;
        // Calls wait for a replica of these seats: they are needed.
        if (pool && pool.capacity().queued > 0) return [];
        const minReplicas = pool ? (found.version.config?.minReplicas ?? 0) : 0;
        const spare = options.seats.surplus(key, { alive: pool?.loads().length ?? 0, minReplicas });
        if (pool && found.version.config) pool.setLimits(options.seats.limits(key, minReplicas));
        return spare.map((seat) => ({ projectId, appId, seat }));
      });
    },
    hostCapacity() {
      const { total, reserved, gpus } = options.budget;
      return { total, reserved, gpus: { total: gpus.gpus.length, held: gpus.held } };
    },
    waitingForCapacity() {
      return livePools().map((pool) => ({ app: pool.label, replicas: pool.capacity().waitingForCapacity }))
        .filter((entry) => entry.replicas > 0);
    },
    replicaStates() {
      const byApp = new Map<string, ReplicaStates>();
      const pools = [
        ...[...apps.values()].flatMap((a) => (a.pool ? [[label(a.version), a.pool] as const] : [])),
        ...[...retired].map((p) => [p.label, p] as const),
      ];
      for (const [app, pool] of pools) {
        const total = byApp.get(app) ?? { starting: 0, idle: 0, busy: 0 };
        const states = pool.states();
        byApp.set(app, {
          starting: total.starting + states.starting,
          idle: total.idle + states.idle,
          busy: total.busy + states.busy,
        });
      }
      return [...byApp].map(([app, states]) => ({ app, ...states }));
    },
    async close() {
      closed = true;
      clearInterval(timer);
      await polling;
      const pools = [...livePools(), ...staged.drain()];
      apps.clear();
      retired.clear();
      await Promise.all(pools.map((pool) => pool.close()));
    },
  };
}
