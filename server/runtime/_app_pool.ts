/** The replica pool of one app version: how its replicas start (Python, custom process, url), jailed and limited. */
import type { AppConfig } from "./_app_config.ts";
import type { AppVersion } from "./_app_registry.ts";
import { batchSpecs, slotsPerReplica } from "./_batch_config.ts";
import { CustomProcessReplica } from "./_custom_replica.ts";
import { FailedReplica } from "./_failed_replica.ts";
import type { HostBudget } from "./_host_budget.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { PythonReplica } from "./_python_replica.ts";
import type { CallableReplica } from "./_replica.ts";
import { prepareVolumes, replicaGpuJail, replicaJail } from "./_replica_jail.ts";
import { type ReplicaGrant, type ReplicaLimits, ReplicaPool } from "./_replica_pool.ts";
import type { Cgroups, ReplicaCgroup, Sandbox } from "../sandbox/mod.ts";
import type { SeatBook } from "./_seat_book.ts";
import { TemplateKeeper } from "./_template_keeper.ts";
import type { ProjectEnvironment, RuntimeOptions } from "./_types.ts";
import { UrlUpstream } from "./_url_upstream.ts";
import { startColdWorker } from "./_worker_process.ts";

/** An app version's `project/app`. */
export function label(version: AppVersion): string {
  return `${version.projectId}/${version.name}`;
}

/** The runtime's options with its parts made (the sandbox, cgroups, budget, seats), as its pools use them. */
export type PoolOptions = RuntimeOptions & {
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

/** The pool of `version`'s replicas; undefined when its config did not load. */
export function createPool(
  version: AppVersion,
  secrets: ProjectEnvironment,
  options: PoolOptions,
): ReplicaPool<CallableReplica> | undefined {
  const { config } = version;
  if (!config) return undefined;
  const name = label(version);
  const { logger, sandbox } = options;
  const jailed = { ...version, config, volumes: options.volumes };
  const versionJail = replicaJail(jailed, secrets.env);
  // A deployment this host has not built yet is built, then its volumes are made sure of, before any of
  // its processes (the template's too) starts.
  const prepare = config.volumes.length
    ? () =>
      (version.prepare?.() ?? Promise.resolve()).then(() => prepareVolumes(jailed, { jailed: sandbox.status.jailed }))
    : version.prepare;
  const worker = {
    appDir: version.dir,
    label: name,
    python: config.python,
    concurrency: config.replicaConcurrency,
    preload: config.preload,
    batch: batchSpecs(config.functions),
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
    const jail = replicaGpuJail(versionJail, grant.gpus, {
      deviceDir: options.gpuDeviceDir,
      driver: options.gpuDriver,
    });
    const custom = config!.custom;
    if (custom?.kind === "process") {
      // A Dockerfile's image gives the command and port that runplane.toml leaves out (docs/runplane-toml.md).
      const image = version.image?.process;
      return new CustomProcessReplica({
        appDir: version.dir,
        label: name,
        logger,
        sandbox,
        jail,
        cgroup,
        prepare,
        ...custom,
        entrypoint: custom.entrypoint ?? image?.command ?? [],
        port: custom.port ?? image?.port,
      });
    }
    const channels = options.replicaChannels?.count ?? 0;
    const cold = () => startColdWorker({ ...worker, jail, cgroup, channels });
    const replica = new PythonReplica({
      ...worker,
      jail,
      onOutput: options.onOutput,
      onBatch: options.onBatch && ((batch) => options.onBatch!(name, batch)),
      cgroup,
      prepare,
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
    // A batch is one slot of replica_concurrency; the replica admits enough calls to fill its batches.
    slotsPerReplica: slotsPerReplica(config),
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
