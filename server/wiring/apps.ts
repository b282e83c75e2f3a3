/**
 * The apps this process serves: each project's secrets (its replicas' environment), the run log, the
 * runtime and its replicas, this process as a host of a cluster when it is one, and the deployments the
 * runtime serves (each needs the other: the runtime is made first and reads the deployments late).
 */
import { join } from "node:path";
import type { ForwardKey } from "../cluster/mod.ts";
import type { Config } from "../config.ts";
import { createDeployments, type Deployments } from "../deployments/mod.ts";
import type { DriverFilesOptions } from "../gpus/mod.ts";
import type { HostRole } from "../host/mod.ts";
import type { RepositoryTrees } from "../integrations/mod.ts";
import type { Logger } from "../log.ts";
import { type ClusterHost, createClusterHost, deploymentsRefused, type HostParts } from "../placement/mod.ts";
import {
  cacheReplicaEnvironments,
  createProjectSecrets,
  type ProjectSecrets,
  type ReplicaEnvironments,
} from "../project_secrets/mod.ts";
import { createRunLogWriter, type RunLogWriter } from "../runs/mod.ts";
import { createRuntime, type DeployedApp, type Runtime, type UnservedApp } from "../runtime/mod.ts";
import { projectOwner, type SandboxStatus } from "../sandbox/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { Store } from "../store/mod.ts";
import { createVolumes, type Volumes, volumesModeOf } from "../volumes/mod.ts";
import type { HostVolumes } from "../volumes/host_volumes.ts";
import { appMounting, hostVolumesOf, volumeUsers } from "./volumes.ts";

/** Options of `wireApps`. */
export interface AppsOptions {
  store: Store;
  logger: Logger;
  /** This process's lease owner id: its host id on a cluster, its builds' owner. */
  owner: string;
  secrets: SecretBox;
  trees: RepositoryTrees;
  parts: HostParts;
  role?: HostRole;
  /** From `joinsCluster`: this process is a host of a cluster when it is not null. */
  clusterKey: ForwardKey | null;
  /** Where the GPUs' device nodes are (default `/dev`; tests point it at fake ones). */
  gpuDeviceDir?: string;
  /** Where the GPU driver's libraries and nvidia-smi are found (see `findDriverFiles`). */
  gpuDriver?: DriverFilesOptions;
  /** Test only: the pause of every follow-up read of the store's deployments (see server/test_hooks/). */
  testDelayLocalSyncMs?: number;
}

/** What `wireApps` made. */
export interface ServerApps {
  projectSecrets: ProjectSecrets;
  /** Each project's volumes on this host (`mountedFiles` for a replica's mounts). */
  volumes: Volumes;
  /** What replicas are shown of them, and what this host cannot see (`/readyz`). */
  hostVolumes: HostVolumes;
  replicaEnvironments: ReplicaEnvironments;
  runLogs: RunLogWriter;
  /** This process's own runtime: a worker's knows the apps and runs nothing. */
  runtime: Runtime;
  /** What handlers, deployments and gauges read of replicas: a worker's are the supervisor's. */
  shown: Runtime;
  /** This process as a host of a cluster, when `clusterKey` is set. */
  cluster?: ClusterHost;
  deployments: Deployments;
}

/** Makes the apps' parts (see the module's comment); nothing starts until `runtime.start()`. */
export function wireApps(config: Config, options: AppsOptions): ServerApps {
  const { store, logger, secrets, role } = options;
  const worker = role?.kind === "worker" ? role : undefined;
  // Each project's secrets, sealed at rest: the environment of its replicas (and of nothing else), with
  // a fingerprint and change wake-ups (from every process on PostgreSQL) to replace them when it changes.
  const projectSecrets = createProjectSecrets({
    db: store.db,
    secrets,
    notifier: store.notifier,
    now: store.clock.now,
    onError: (error) => logger.warn({ err: error }, "telling of a project secrets change failed"),
  });
  // The runtime serves the deployments this process has ready; they are made after it (each needs the other).
  let deployments: Deployments | undefined;
  const volumes = wireVolumes(config, {
    store,
    logger,
    inUse: (projectId, name) => appMounting(deployments?.deployedApps() ?? [], { projectId, name }),
  });
  const hostVolumes = hostVolumesOf(volumes, logger);
  // A change of a project's secrets replaces its replicas (the runtime's reload sees a new fingerprint).
  let reloadApps = () => {};
  const replicaEnvironments = cacheReplicaEnvironments(projectSecrets, { changed: () => reloadApps() });
  const runLogs = createRunLogWriter(store.db, { limitBytes: config.runLogLimitBytes, logger });
  worker?.useRunLogs?.((line) => runLogs.add(line));
  const { runtime, cluster } = wireRuntime(config, {
    ...options,
    runLogs,
    replicaEnvironments,
    deployedApps: () => deployments?.deployedApps() ?? [],
    unservedApps: () => deployments?.unservedApps() ?? [],
    hostVolumes,
  });
  // What handlers, deployments and gauges read of replicas: a worker's are the supervisor's.
  const shown = worker ? worker.viewRuntime(runtime) : runtime;
  reloadApps = () => {
    runtime.reload().catch((error) => logger.error({ err: error }, "reloading apps after a secrets change failed"));
  };
  deployments = createDeployments({
    db: store.db,
    notifier: store.notifier,
    logger,
    owner: options.owner,
    now: store.clock.now,
    settings: {
      dataDir: config.dataDir,
      timeoutMs: config.buildTimeoutMs,
      pipIndexUrl: config.pipIndexUrl,
      pipFindLinks: config.pipFindLinks,
      pipAllowUnpinned: config.pipAllowUnpinned,
      allowExternalRuntimes: config.allowExternalRuntimes,
      bundleLimitBytes: config.bundleLimitBytes,
      sandbox: options.parts.sandbox,
      images: options.parts.images,
      // A deployment's [volumes] must name its project's volumes; `[build] volumes` shows them to its commands.
      volumes,
      // SQLite's bundles are files in the data dir; PostgreSQL's are rows every host reads.
      bundleDir: store.shared ? undefined : join(config.dataDir, "bundles"),
    },
    runtime: shown,
    archiveRepository: (projectId, request) => options.trees.archive(projectId, request),
    deferBuilds: options.clusterKey !== null,
    followOnly: worker !== undefined,
    imageCache: { boundBytes: config.imageCacheBytes, minAgeMs: config.imageCacheMinAgeMs },
    testDelayLocalSyncMs: options.testDelayLocalSyncMs,
  });
  return { projectSecrets, volumes, hostVolumes, replicaEnvironments, runLogs, runtime, shown, cluster, deployments };
}

/** Options of `loadApps`. */
export interface LoadAppsOptions {
  /** This host's jail: without one under `auto`, the store's deployments are not served here. */
  sandbox: SandboxStatus;
  logger: Logger;
  /** Called once the apps have loaded (readiness waits for it). */
  loaded(): void;
}

/**
 * Loads the apps: the runtime's, then the store's deployments (unless refused here), then the cluster
 * host's seats, then every app's `min_replicas`. Calls load an app on demand, so the server listens
 * meanwhile; a failure is logged. Resolves either way.
 */
export function loadApps(apps: ServerApps, options: LoadAppsOptions): Promise<void> {
  const { runtime, deployments, cluster } = apps;
  // Without a jail under `auto`, the store's deployments (an earlier, jailed run's) are neither built nor
  // served here: their code would run unjailed. They stay as they are for a process that can jail them.
  const servesDeployments = !deploymentsRefused(options.sandbox);
  return runtime.start().then(() => servesDeployments ? deployments.start() : undefined)
    // A volume a served app mounts and this host cannot see is said at start (and in /readyz).
    .then(() => apps.hostVolumes.check(volumeUsers(deployments.deployedApps()))).then(() => cluster?.start())
    .then(() => runtime.warm()).then(
      () => options.loaded(),
      (error) => options.logger.error({ err: error }, "loading apps failed"),
    );
}

/** The runtime and, on a host of a cluster, the cluster host that counts its replicas by seats. */
function wireRuntime(
  config: Config,
  options: AppsOptions & {
    runLogs: RunLogWriter;
    replicaEnvironments: ReplicaEnvironments;
    deployedApps(): DeployedApp[];
    unservedApps(): UnservedApp[];
    hostVolumes: HostVolumes;
  },
): { runtime: Runtime; cluster?: ClusterHost } {
  const { store, logger, role, clusterKey, parts } = options;
  const { sandbox, cgroups, gpus } = parts;
  // With RUNPLANE_ADVERTISE_URL on a shared store, this process is a host of one cluster (issue 31):
  // replicas are counted by seats in the store and calls go to warm capacity on any host. On a host with
  // workers the supervisor is that host; its workers hand it every call.
  let cluster: ClusterHost | undefined;
  const runtime = createRuntime(config.appsDir, {
    // A worker's runtime knows the apps (for 404s and settings) and never starts a replica: no seats.
    seated: clusterKey !== null || role?.kind === "worker",
    onLoadChange: clusterKey ? () => cluster?.registry.changed() : undefined,
    logger,
    sandbox,
    cgroups,
    host: { cpu: config.hostCpu, memoryBytes: config.hostMemoryBytes },
    gpus: gpus.gpus,
    gpuDeviceDir: options.gpuDeviceDir,
    gpuDriver: options.gpuDriver,
    projectReplicaLimit: config.projectReplicaLimit,
    forkReplicas: config.forkReplicas,
    volumes: options.hostVolumes,
    queueLimit: config.appQueueLimit,
    deployedApps: options.deployedApps,
    unservedApps: options.unservedApps,
    onOutput: (line) => options.runLogs.add(line),
    projectEnvironment: (projectId) => options.replicaEnvironments.get(projectId),
    externalRuntimes: { allowed: config.allowExternalRuntimes, allowPrivate: config.webhookAllowPrivate },
    replicaChannels: role?.kind === "supervisor" ? role.channels?.runtimeOption() : undefined,
  });
  if (role?.kind === "supervisor") role.channels?.attach(runtime);
  if (clusterKey && config.advertiseUrl) {
    cluster = createClusterHost({
      store,
      runtime,
      logger,
      hostId: options.owner,
      url: config.advertiseUrl,
      capacity: { cpu: config.hostCpu, memoryBytes: config.hostMemoryBytes, gpus: gpus.gpus.length },
      leaseMs: config.runLeaseMs,
      forwardKey: clusterKey,
    });
  }
  return { runtime, cluster };
}

/** The project volumes service of this host (issue 48), warning loudly when sizes are not enforced here. */
function wireVolumes(
  config: Config,
  options: { store: Store; logger: Logger; inUse(projectId: string, name: string): string | undefined },
): Volumes {
  const { mode, warning } = volumesModeOf(config.volumesMode);
  if (warning) options.logger.warn({ volumes_mode: mode }, warning);
  return createVolumes({
    db: options.store.db,
    now: options.store.clock.now,
    dir: config.volumesDir ?? join(config.dataDir, "volumes"),
    mode,
    // A replica writes its project's volume as the project's uid (a root server's jails drop to it).
    ownerOf: projectOwner,
    inUse: options.inUse,
  });
}
