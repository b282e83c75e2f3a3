/**
 * The Runplane server: create it from a `Config`, `listen()`, and `close()` it. This is the composition
 * root: everything a handler needs is wired here and in `server/wiring/` (each part's wiring), and
 * nowhere else; where a call runs is the placement layer's (`server/placement/`). Only `server/main.ts`
 * and `server/cli/` import this module (`npm run check` enforces it): the supervisor and workers of
 * `server/host/` are handed `createServer` by `server/main.ts`.
 */
import { randomBytes } from "node:crypto";
import { forwardKey } from "./cluster/mod.ts";
import type { Config } from "./config.ts";
import type { ServerContext } from "./context.ts";
import type { HostRole, WorkerRole } from "./host/mod.ts";
import { createDrainGate, type WebSocketUpgrades } from "./http/mod.ts";
import { createRepositoryTrees } from "./integrations/mod.ts";
import { createLogger, type Logger } from "./log.ts";
import { createMetrics } from "./metrics/mod.ts";
import { hostParts, type HostParts, joinsCluster, placeExecutors } from "./placement/mod.ts";
import { offsetClock, type TestHooks } from "./test_hooks/mod.ts";
import { startDeliveries } from "./wiring/deliveries.ts";
import { createServerApp } from "./wiring/http_app.ts";
import { createLifecycle } from "./wiring/lifecycle.ts";
import { createListener } from "./wiring/listener.ts";
import { loadApps, wireApps } from "./wiring/apps.ts";
import { wireGauges } from "./wiring/gauges.ts";
import { createReadiness } from "./wiring/readiness.ts";
import { wireRuns } from "./wiring/runs.ts";
import { openServerStore } from "./wiring/store.ts";
import { webSocketTickets, wireWebSockets } from "./wiring/websockets.ts";

export { type Config, ConfigError, loadConfig, SETTINGS } from "./config.ts";
export { DataDirError } from "./data_dir.ts";
export type { HostFacts, HostRole } from "./host/mod.ts";

/** A running (or ready to run) server. */
export interface RunplaneServer {
  context: ServerContext;
  /** True when the data dir had no store before this server opened it. */
  freshDataDir: boolean;
  /** Starts listening on the configured host and port; resolves with the base URL. */
  listen(): Promise<string>;
  /** The base URL, once listening. */
  readonly url: string;
  /** Settles once the apps folder and the store's deployments have loaded (or their loading failed). */
  readonly appsLoaded: Promise<void>;
  /**
   * Graceful stop: new calls get 503, in-flight calls, streams and async runs may finish within
   * `timeoutMs` (default `RUNPLANE_DRAIN_TIMEOUT`); what still runs then is recorded `interrupted`;
   * then `close()`. Called again while draining, it stops waiting at once (as if the timeout had
   * passed) and resolves with the first call.
   */
  drain(timeoutMs?: number): Promise<void>;
  /** Stops accepting connections, stops every app replica, ends open connections, and closes the store. */
  close(): Promise<void>;
  /** WebSocket runs: a host's supervisor handles here the upgrades its workers hand it. */
  readonly upgrades: WebSocketUpgrades;
}

/** Options of `createServer`. */
export interface CreateServerOptions {
  logger?: Logger;
  /**
   * Where the GPUs' device nodes (default `/dev`) and the driver's per-GPU folders (default
   * `/proc/driver/nvidia/gpus`) are, and a folder holding the driver's libraries searched instead of the
   * linker's cache (`ldconfig -p`): tests point them at folders of fake ones.
   */
  gpuPaths?: { devices?: string; driver?: string; libraries?: string };
  /** This process's part of a host of several HTTP processes (`RUNPLANE_WORKERS` > 1; see server/host/). */
  role?: HostRole;
  /** Test only (server/test_hooks): a slow follower, a host clock that is off. None by default. */
  testHooks?: TestHooks;
}

/** The cluster a handler sees: this host's view of it, a worker's (through its supervisor), or none. */
function clusterContext(
  config: Config,
  parts: { cluster?: { registry: { view: NonNullable<ServerContext["cluster"]>["view"] } }; worker?: WorkerRole },
): ServerContext["cluster"] {
  const { cluster, worker } = parts;
  if (cluster) return { view: cluster.registry.view };
  return worker && config.advertiseUrl ? { view: () => worker.clusterView() ?? { hosts: [], seats: [] } } : null;
}

/**
 * Creates a server from validated settings: makes the data dir and keeps it private (a `DataDirError`
 * when it cannot be written or made private), opens the store, loads the signing key, builds the app.
 */
export async function createServer(config: Config, options: CreateServerOptions = {}): Promise<RunplaneServer> {
  const rootLogger = options.logger ?? createLogger({ level: config.logLevel });
  // One lease owner id for this process's runs, deliveries and builds, recorded in the data dir with its pid.
  const owner = `rp_${randomBytes(8).toString("hex")}`;
  const role = options.role;
  const { store, outage, logger, keys, freshDataDir } = await openServerStore(config, {
    logger: rootLogger,
    owner,
    role,
    // Test only: the host's clock as a host whose clock is off would read it.
    localNow: options.testHooks?.clockOffsetMs ? offsetClock(options.testHooks.clockOffsetMs) : undefined,
  });
  const secrets = keys.secrets;
  const parts: HostParts = await hostParts(config, { logger, role, gpuPaths: options.gpuPaths, owner })
    .catch(async (error: unknown) => {
      await store.close();
      throw error;
    });
  const { sandbox, cgroups, gpus } = parts;
  const worker = role?.kind === "worker" ? role : undefined;
  // A worker runs nothing itself: the host's jail is the one its supervisor found.
  const sandboxStatus = worker ? worker.facts.sandbox : sandbox.status;
  const metrics = createMetrics();
  const gate = createDrainGate();
  let appsLoaded = false;
  const readiness = createReadiness({ gate, store, outage, owner, worker, appsLoaded: () => appsLoaded });
  const trees = createRepositoryTrees({
    dataDir: config.dataDir,
    store: { db: store.db, secrets },
    logger,
    metrics: metrics.registry,
    cacheEntries: config.treeCacheEntries,
  });
  // Whether this process is a host of a cluster (a worker never is: its supervisor is).
  const clusterKey = joinsCluster(role, {
    advertiseUrl: config.advertiseUrl,
    sharedStore: store.shared,
    masterKey: config.masterKey,
  });
  const apps = wireApps(config, {
    store,
    logger,
    owner,
    secrets,
    trees,
    parts,
    role,
    clusterKey,
    gpuDeviceDir: options.gpuPaths?.devices,
    // The driver files an image's GPU replica is shown: the nvidia-smi that lists the GPUs among them.
    gpuDriver: { libraryDir: options.gpuPaths?.libraries, nvidiaSmi: config.nvidiaSmi },
    testDelayLocalSyncMs: options.testHooks?.delayLocalSyncMs,
  });
  const { runtime, shown, cluster } = apps;
  // The server listens while apps load; readiness says when they have.
  const loading = loadApps(apps, { sandbox: sandboxStatus, logger, loaded: () => (appsLoaded = true) });
  const deliveries = startDeliveries(config, { store, secrets, logger, metrics, owner, role });
  // Which executors run this process's calls, forwarded calls and dispatch: its role × cluster.
  const executors = placeExecutors(role, { runtime, cluster });
  const runParts = { store, outage, secrets, logger, metrics, owner, executors, deliveries, logs: apps.runLogs };
  const { runs, runChanges } = wireRuns(config, runParts);
  wireGauges(metrics, { runs, runtime: shown, cluster });
  const context: ServerContext = {
    config,
    store,
    key: keys.signing.current,
    signingKeys: keys.signing,
    logger,
    readiness,
    metrics,
    secrets,
    trees,
    runtime: shown,
    runs,
    // A cluster's hosts share the tickets in the store: one minted through a host opens on another.
    websocketTickets: webSocketTickets(role, cluster ? { db: store.db, now: store.clock.now } : undefined),
    runChanges,
    deployments: apps.deployments,
    sandbox: sandboxStatus,
    cgroups: cgroups.status,
    gpus,
    ...{ projectSecrets: apps.projectSecrets, volumes: apps.volumes },
    hostVolumes: apps.hostVolumes,
    forwardKey: clusterKey ?? (config.masterKey ? forwardKey(config.masterKey) : null),
    host: { id: worker?.hostId ?? owner, url: config.advertiseUrl ?? null },
    cluster: clusterContext(config, { cluster, worker }),
  };
  const app = createServerApp(context, { signingKeys: keys.signing, gate, outage, executors });
  const websockets = wireWebSockets(context, { signingKeys: keys.signing, gate, role, cluster });
  const listener = createListener(config, { app, logger, role, executors, gate, upgrades: websockets });
  const { close, drain } = createLifecycle({
    ...apps,
    logger,
    gate,
    listener,
    loading,
    runs,
    runChanges,
    cgroups,
    deliveries: deliveries.worker,
    store,
    sandbox,
    outage,
    websockets,
  });
  return {
    context,
    freshDataDir,
    get url() {
      return listener.url;
    },
    listen: () => listener.listen(),
    appsLoaded: loading,
    upgrades: websockets,
    drain: (timeoutMs = config.drainTimeoutMs) => drain(timeoutMs),
    close,
  };
}
