/**
 * The Runplane server: create it from a `Config`, `listen()`, and `close()` it. Everything a handler
 * needs is wired here and nowhere else.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { createServer as createHttpServer, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createSessionRecords, createTokenVerifier } from "./auth/mod.ts";
import { forwardKey, seatCounts } from "./cluster/mod.ts";
import { type ClusterHost, createClusterHost } from "./cluster_host.ts";
import { type Config, ConfigError } from "./config.ts";
import type { Readiness, ServerContext } from "./context.ts";
import { prepareDataDir } from "./data_dir.ts";
import { deploymentsRefused } from "./deployment_gate.ts";
import { hostParts, type HostParts } from "./host_parts.ts";
import { listenForWorkerCalls, type WorkerCallsServer } from "./host/call_server.ts";
import type { HostRole } from "./host_role.ts";
import { createDeployments } from "./deployments/mod.ts";
import { createHandlers } from "./handlers/mod.ts";
import { answerClientErrors, createDrainGate, createHttpApp } from "./http/mod.ts";
import { createRepositoryTrees } from "./integrations/mod.ts";
import { keysBootstrap, loadKeys, MasterKeyError, type ProcessKeys } from "./keys/mod.ts";
import { createLogger, type Logger } from "./log.ts";
import { createMetrics, type Metrics } from "./metrics/mod.ts";
import { cacheReplicaEnvironments, createProjectSecrets } from "./project_secrets/mod.ts";
import { runtimeExecutor } from "./run_executor.ts";
import { createRuntime, type DeployedApp, type Runtime, type UnservedApp } from "./runtime/mod.ts";
import {
  createRunChangeFeed,
  createRunLogWriter,
  createRunService,
  type ExecuteRequest,
  type RunService,
  runOwnersDir,
} from "./runs/mod.ts";
import {
  createStoreOutage,
  migrationsApplied,
  openStore,
  quietDuringOutages,
  type StoreOutage,
  writeProbe,
} from "./store/mod.ts";
import { offsetClock, type TestHooks } from "./test_hooks/mod.ts";
import { startDeliveryWorker } from "./webhooks/mod.ts";

export { type Config, ConfigError, loadConfig, SETTINGS } from "./config.ts";
export { DataDirError } from "./data_dir.ts";
export type { HostFacts, HostRole } from "./host_role.ts";

/** A running (or ready to run) server. */
export interface RunplaneServer {
  context: ServerContext;
  /** True when the data dir had no store before this server opened it. */
  freshDataDir: boolean;
  /** Starts listening on the configured host and port; resolves with the base URL. */
  listen(): Promise<string>;
  /** The base URL, once listening. */
  readonly url: string;
  /**
   * Graceful stop: new calls get 503, in-flight calls, streams and async runs may finish within
   * `timeoutMs` (default `RUNPLANE_DRAIN_TIMEOUT`); what still runs then is recorded `interrupted`;
   * then `close()`. Called again while draining, it stops waiting at once (as if the timeout had
   * passed) and resolves with the first call.
   */
  drain(timeoutMs?: number): Promise<void>;
  /** Stops accepting connections, stops every app replica, ends open connections, and closes the store. */
  close(): Promise<void>;
}

/** Options of `createServer`. */
export interface CreateServerOptions {
  logger?: Logger;
  /**
   * Where the GPUs' device nodes (default `/dev`) and the driver's per-GPU folders (default
   * `/proc/driver/nvidia/gpus`) are: tests point them at folders of fake ones.
   */
  gpuPaths?: { devices?: string; driver?: string };
  /** This process's part of a host of several HTTP processes (`RUNPLANE_WORKERS` > 1; see server/host/). */
  role?: HostRole;
  /** Test only (server/test_hooks): a slow follower, a host clock that is off. None by default. */
  testHooks?: TestHooks;
}

/**
 * Creates a server from validated settings: makes the data dir and keeps it private (a `DataDirError`
 * when it cannot be written or made private), opens the store, loads the signing key, builds the app.
 */
export async function createServer(config: Config, options: CreateServerOptions = {}): Promise<RunplaneServer> {
  const rootLogger = options.logger ?? createLogger({ level: config.logLevel });
  prepareDataDir(config.dataDir, { logger: rootLogger });
  const freshSqliteFile = !existsSync(join(config.dataDir, "runplane.sqlite3"));
  // One lease owner id for this process's runs, deliveries and builds, recorded in the data dir with its pid.
  const owner = `rp_${randomBytes(8).toString("hex")}`;
  // Made once the store is open (its probe writes there); the store's errors before then are logged.
  let storeOutage: StoreOutage | undefined;
  const store = await openStore(config.dataDir, {
    databaseUrl: config.databaseUrl,
    bootstrap: keysBootstrap(config.masterKey),
    poolSize: config.databasePoolSize,
    preparedStatements: config.databasePreparedStatements,
    statementTimeoutMs: config.databaseStatementTimeoutMs,
    // Test only: the host's clock as a host whose clock is off would read it.
    localNow: options.testHooks?.clockOffsetMs ? offsetClock(options.testHooks.clockOffsetMs) : undefined,
    onError(error) {
      if (storeOutage?.refused(error)) return;
      rootLogger.warn({ err: error }, "a background database operation failed; the store carries on");
    },
    checkpoints: options.role?.kind === "worker" ? "elsewhere" : "background",
    relay: config.databaseUrl ? undefined : options.role?.relay,
    onCheckpointerLost: (error) =>
      rootLogger.error({ err: error }, "the WAL checkpoint worker failed; checkpoints run in commits again"),
    onCheckpointerBack: () =>
      rootLogger.info("the WAL checkpoint worker checkpoints again; commits no longer checkpoint"),
  }).catch(asConfigError);
  // With PostgreSQL the data dir holds no store: "fresh" means the schema was just created.
  const freshDataDir = store.shared ? store.fresh : freshSqliteFile;
  rootLogger.info({ engine: store.engine, database: store.path }, "store opened");
  storeOutage = createStoreOutage({ logger: rootLogger, probe: () => writeProbe(store.db, owner, store.clock.now()) });
  const outage = storeOutage;
  // From here on, a background loop's failure that is the store being away counts toward the outage
  // (logged once when it starts and once when it ends) instead of a line per loop and tick.
  const logger = quietDuringOutages(rootLogger, outage);
  let keys: ProcessKeys;
  try {
    keys = await loadKeys(store, { dataDir: config.dataDir, masterKey: config.masterKey });
  } catch (error) {
    await store.close();
    return asConfigError(error);
  }
  const key = keys.signing.current;
  const secrets = keys.secrets;
  let parts: HostParts;
  try {
    parts = await hostParts(config, { logger, role: options.role, gpuPaths: options.gpuPaths, owner });
  } catch (error) {
    await store.close();
    throw error;
  }
  const { sandbox, cgroups, gpus } = parts;
  const role = options.role;
  const worker = role?.kind === "worker" ? role : undefined;
  // A worker runs nothing itself: the host's jail is the one its supervisor found.
  const sandboxStatus = worker ? worker.facts.sandbox : sandbox.status;
  const metrics = createMetrics();
  const gate = createDrainGate();
  let appsLoaded = false;
  const readiness: Readiness = {
    async reasons() {
      const reasons: string[] = [];
      if (gate.draining) reasons.push("the server is draining");
      if (!appsLoaded) reasons.push("apps are loading (min_replicas warming up)");
      if (worker && !worker.connected()) reasons.push("the host's supervisor is gone");
      try {
        if (!(await migrationsApplied(store.db))) reasons.push("store migrations are not applied");
        // A read works on a full disk: only a write tells that the store takes runs.
        if (!outage.active) await writeProbe(store.db, owner, store.clock.now());
      } catch (error) {
        if (!outage.refused(error)) reasons.push(`store unreachable: ${(error as Error).message}`);
      }
      if (outage.active) reasons.push(`the store cannot write (${outage.reason})`);
      return reasons;
    },
  };
  const trees = createRepositoryTrees({
    dataDir: config.dataDir,
    store: { db: store.db, secrets },
    logger,
    metrics: metrics.registry,
    cacheEntries: config.treeCacheEntries,
  });
  // Each project's secrets, sealed at rest: the environment of its replicas (and of nothing else), with
  // a fingerprint and change wake-ups (from every process on PostgreSQL) to replace them when it changes.
  const projectSecrets = createProjectSecrets({
    db: store.db,
    secrets,
    notifier: store.notifier,
    now: store.clock.now,
    onError: (error) => logger.warn({ err: error }, "telling of a project secrets change failed"),
  });
  // A change of a project's secrets replaces its replicas (the runtime's reload sees a new fingerprint).
  let reloadApps = () => {};
  const replicaEnvironments = cacheReplicaEnvironments(projectSecrets, { changed: () => reloadApps() });
  // The runtime serves the deployments this process has ready; they are made after it (each needs the other).
  let deployedApps: () => DeployedApp[] = () => [];
  let unservedApps: () => UnservedApp[] = () => [];
  const runLogs = createRunLogWriter(store.db, { limitBytes: config.runLogLimitBytes, logger });
  worker?.useRunLogs?.((line) => runLogs.add(line));
  // With RUNPLANE_ADVERTISE_URL on a shared store, this process is a host of one cluster (issue 31):
  // replicas are counted by seats in the store and calls go to warm capacity on any host. On a host with
  // workers the supervisor is that host; its workers hand it every call.
  const clusterKey = config.advertiseUrl && store.shared && config.masterKey && !worker
    ? forwardKey(config.masterKey)
    : null;
  let cluster: ClusterHost | undefined;
  const runtime = createRuntime(config.appsDir, {
    // A worker's runtime knows the apps (for 404s and settings) and never starts a replica: no seats.
    seated: clusterKey !== null || worker !== undefined,
    onLoadChange: clusterKey ? () => cluster?.registry.changed() : undefined,
    logger,
    sandbox,
    cgroups,
    host: { cpu: config.hostCpu, memoryBytes: config.hostMemoryBytes },
    gpus: gpus.gpus,
    gpuDeviceDir: options.gpuPaths?.devices,
    projectReplicaLimit: config.projectReplicaLimit,
    forkReplicas: config.forkReplicas,
    queueLimit: config.appQueueLimit,
    deployedApps: () => deployedApps(),
    unservedApps: () => unservedApps(),
    onOutput: (line) => runLogs.add(line),
    projectEnvironment: (projectId) => replicaEnvironments.get(projectId),
    externalRuntimes: { allowed: config.allowExternalRuntimes, allowPrivate: config.webhookAllowPrivate },
    replicaChannels: role?.kind === "supervisor" ? role.channels?.runtimeOption() : undefined,
  });
  if (role?.kind === "supervisor") role.channels?.attach(runtime);
  if (clusterKey && config.advertiseUrl) {
    cluster = createClusterHost({
      store,
      runtime,
      logger,
      hostId: owner,
      url: config.advertiseUrl,
      capacity: { cpu: config.hostCpu, memoryBytes: config.hostMemoryBytes, gpus: gpus.gpus.length },
      leaseMs: config.runLeaseMs,
      forwardKey: clusterKey,
    });
  }
  // What handlers, deployments and gauges read of replicas: a worker's are the supervisor's.
  const shown = worker ? worker.viewRuntime(runtime) : runtime;
  reloadApps = () => {
    runtime.reload().catch((error) => logger.error({ err: error }, "reloading apps after a secrets change failed"));
  };
  const deployments = createDeployments({
    db: store.db,
    notifier: store.notifier,
    logger,
    owner,
    now: store.clock.now,
    settings: {
      dataDir: config.dataDir,
      timeoutMs: config.buildTimeoutMs,
      pipIndexUrl: config.pipIndexUrl,
      pipFindLinks: config.pipFindLinks,
      pipAllowUnpinned: config.pipAllowUnpinned,
      allowExternalRuntimes: config.allowExternalRuntimes,
      bundleLimitBytes: config.bundleLimitBytes,
      sandbox,
      // SQLite's bundles are files in the data dir; PostgreSQL's are rows every host reads.
      bundleDir: store.shared ? undefined : join(config.dataDir, "bundles"),
    },
    runtime: shown,
    archiveRepository: (projectId, request) => trees.archive(projectId, request),
    deferBuilds: clusterKey !== null,
    followOnly: worker !== undefined,
    testDelayLocalSyncMs: options.testHooks?.delayLocalSyncMs,
  });
  deployedApps = () => deployments.deployedApps();
  unservedApps = () => deployments.unservedApps();
  // Without a jail under `auto`, the store's deployments (an earlier, jailed run's) are neither built nor
  // served here: their code would run unjailed. They stay as they are for a process that can jail them.
  const servesDeployments = !deploymentsRefused(sandboxStatus);
  // Calls load an app on demand, so the server listens while apps load; readiness says when they have.
  const loading = runtime.start().then(() => servesDeployments ? deployments.start() : undefined).then(() =>
    cluster?.start()
  ).then(() => runtime.warm()).then(
    () => void (appsLoaded = true),
    (error) => logger.error({ err: error }, "loading apps failed"),
  );
  const deliveries = worker ? undefined : startDeliveryWorker({
    owner,
    db: store.db,
    secrets,
    logger,
    headerVendor: config.webhookHeaderVendor,
    timeoutMs: config.webhookTimeoutMs,
    perDestination: config.webhookPerDestination,
    retryDelayMs: config.webhookRetryDelayMs,
    guard: { allowPrivate: config.webhookAllowPrivate },
    metrics,
    wakeUps: store.notifier,
    now: store.clock.now,
  });
  // A delivery committed here wakes this worker at once, and (shared store) the other processes' ones:
  // one wake-up in flight at a time is enough, they only shorten the next poll.
  let announcingDeliveries = false;
  function deliveriesAdded(): void {
    deliveries?.wake();
    if ((!store.shared && !role) || announcingDeliveries) return;
    announcingDeliveries = true;
    store.notifier.notify("runplane_deliveries").catch((error) =>
      logger.warn({ err: error }, "announcing webhook deliveries failed; other processes poll for them")
    ).finally(() => (announcingDeliveries = false));
  }
  // This host's own replicas. The endpoint other hosts forward calls to always runs them here (on a
  // cluster host, on a replica it may place here): a forwarded call is never forwarded again.
  const localExecutor = runtimeExecutor(runtime);
  const hereExecutor = worker
    ? { ...localExecutor, execute: (request: ExecuteRequest) => worker.forward(request, { here: true }) }
    : cluster?.executor.placing ?? localExecutor;
  const runChanges = createRunChangeFeed({ notifier: store.notifier, logger });
  const runs = createRunService({
    db: store.db,
    secrets,
    logger,
    config: {
      resultTtlMs: config.resultTtlMs,
      runRetentionMs: config.runRetentionMs,
      runLeaseMs: config.runLeaseMs,
      webhookAllowPrivate: config.webhookAllowPrivate,
      resultLimitBytes: config.resultLimitBytes,
    },
    executor: worker
      ? { ...localExecutor, execute: (request) => worker.forward(request) }
      : cluster?.executor ?? localExecutor,
    dispatch: worker === undefined,
    metrics,
    owner,
    storeOutage: outage,
    ownersDir: runOwnersDir(config.dataDir, { sharedStore: store.shared }),
    notifier: store.notifier,
    now: store.clock.now,
    onDeliveries: deliveriesAdded,
    deliveryHandOff: deliveries?.handOff,
    onChange: runChanges.publish,
    changesWanted: runChanges.watches,
    logs: runLogs,
  });
  wireGauges(metrics, { runs, runtime: shown, cluster });
  const context: ServerContext = {
    config,
    store,
    key,
    signingKeys: keys.signing,
    logger,
    readiness,
    metrics,
    secrets,
    trees,
    runtime: shown,
    runs,
    runChanges,
    deployments,
    sandbox: sandboxStatus,
    cgroups: cgroups.status,
    gpus,
    projectSecrets,
    forwardKey: clusterKey ?? (config.masterKey ? forwardKey(config.masterKey) : null),
    host: { id: worker?.hostId ?? owner, url: config.advertiseUrl ?? null },
    cluster: cluster
      ? { view: cluster.registry.view }
      : worker && config.advertiseUrl
      ? { view: () => worker.clusterView() ?? { hosts: [], seats: [] } }
      : null,
  };
  const app = createHttpApp({
    handlers: createHandlers(context),
    verifier: createTokenVerifier({ db: store.db, keys: keys.signing }),
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    bundleLimitBytes: config.bundleLimitBytes,
    spoolDir: join(config.dataDir, "uploads"),
    responseCheck: config.responseCheck,
    dashboard: { secrets: context.secrets, records: createSessionRecords(store.db) },
    gate,
    storeOutage: outage,
    forwardedCalls: context.forwardKey
      ? { key: context.forwardKey, executor: hereExecutor, now: store.clock.now }
      : undefined,
    onRequestFinished(request) {
      metrics.httpRequestDuration.observe(
        { operation_id: request.operationId ?? "unmatched", method: request.method, status: String(request.status) },
        request.durationMs / 1000,
      );
    },
  });
  let server: Server | undefined;
  let workerCalls: WorkerCallsServer | undefined;
  let url = "";
  let listening: Promise<void> = Promise.resolve();
  let closing: Promise<void> | undefined;

  /** Stops accepting connections (once); resolves when the open ones have ended. */
  function stopListening(): Promise<void> {
    if (server?.listening) listening = new Promise<void>((resolve) => server!.close(() => resolve()));
    if (workerCalls) listening = workerCalls.close();
    return listening;
  }

  function close(): Promise<void> {
    closing ??= (async () => {
      await loading;
      const connectionsEnded = stopListening();
      server?.closeIdleConnections();
      // Stopping the dispatcher first keeps it from starting runs on replicas that are going away;
      // stopping the replicas ends the calls (and streams) still open, so the connections can finish.
      await runs.stop();
      // Ends the pages' event streams, so their connections can close.
      await runChanges.close();
      await deployments.stop();
      replicaEnvironments.close();
      // Its seats go first, so no host forwards a call to replicas that are going away.
      await cluster?.stop();
      await runtime.close();
      await cgroups.close();
      await runLogs.close();
      // A call answered after the first sweep (a drain cut short answers its calls 409) leaves its kept-alive
      // connection idle: sweep again until every connection ended, or one would hold the process for the
      // keep-alive timeout (65 s).
      const sweep = setInterval(() => server?.closeIdleConnections(), 100);
      await connectionsEnded.finally(() => clearInterval(sweep));
      await deliveries?.stop();
      await store.close();
      sandbox.close();
      outage.close();
    })();
    return closing;
  }

  /** The supervisor's endpoint: a Unix socket only its own user may open, where its workers hand it calls. */
  async function listenForWorkers(supervisor: Extract<HostRole, { kind: "supervisor" }>): Promise<string> {
    workerCalls = await listenForWorkerCalls(supervisor.socketPath, {
      token: supervisor.callToken,
      executor: cluster?.executor ?? localExecutor,
      hereExecutor,
      bodyLimitBytes: config.bodyLimitBytes,
      logger,
      gate,
      seats: supervisor.channels,
    });
    url = `unix:${supervisor.socketPath}`;
    logger.info({ socket: supervisor.socketPath }, "supervisor listening for its workers");
    return url;
  }

  let draining: Promise<void> | undefined;
  let cutDrainShort = () => {};

  function drain(timeoutMs = config.drainTimeoutMs): Promise<void> {
    if (draining) {
      cutDrainShort();
      return draining;
    }
    const cutShort = new Promise<void>((resolve) => (cutDrainShort = resolve));
    draining = drainFor(timeoutMs, cutShort);
    return draining;
  }

  async function drainFor(timeoutMs: number, cutShort: Promise<void>): Promise<void> {
    gate.close();
    logger.info({ timeout_ms: timeoutMs }, "draining: new calls get 503; in-flight calls, streams and runs may finish");
    // The listener stays open while draining: a call that still arrives gets a 503 problem with
    // Retry-After and `Connection: close`, and probes see /readyz fail, instead of a refused connection
    // that a load balancer might retry blindly.
    await runs.stopDispatching();
    // Its seats go at once: the other hosts stop sending it calls and may start the replicas it held,
    // while the calls in flight here finish on its own.
    await cluster?.stop();
    let wasCutShort = false;
    await Promise.race([
      Promise.all([gate.idle(timeoutMs), runs.settled(timeoutMs)]),
      cutShort.then(() => (wasCutShort = true)),
    ]);
    const [requests, running] = [gate.active, await runs.settled(0)];
    if (requests > 0 || running > 0) {
      const interrupted = await runs.abandon();
      logger.warn(
        { requests, runs: running, interrupted },
        `${wasCutShort ? "drain cut short" : "drain timeout reached"}; stopping what still runs`,
      );
    }
    await close();
    logger.info("drained");
  }

  return {
    context,
    freshDataDir,
    get url() {
      return url;
    },
    listen() {
      if (role?.kind === "supervisor") return listenForWorkers(role);
      return new Promise((resolve, reject) => {
        server = createHttpServer(worker ? withWorkerHeader(app.callback(), worker.id) : app.callback())
          .listen(config.port, config.host);
        answerClientErrors(server, { logger });
        server.once("error", reject);
        server.once("listening", () => {
          const address = server!.address() as AddressInfo;
          const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
          url = `http://${host === "0.0.0.0" ? "127.0.0.1" : host}:${address.port}`;
          server!.keepAliveTimeout = 65_000;
          logger.info({ url }, "listening");
          resolve(url);
        });
      });
    },
    drain,
    close,
  };
}

/**
 * `handle` with `X-Runplane-Worker: <id>` on every answer: which of the host's workers took the request
 * (its connection), for an operator reading a trace, and for the tests that spread calls.
 */
function withWorkerHeader(handle: RequestListener, id: number): RequestListener {
  const value = String(id);
  return (request, response) => {
    response.setHeader("X-Runplane-Worker", value);
    return handle(request, response);
  };
}

/** Where the live gauges read from: queued runs, this host's capacity and replicas, and (on a cluster host) the cluster's view. */
function wireGauges(metrics: Metrics, sources: { runs: RunService; runtime: Runtime; cluster?: ClusterHost }): void {
  const { runs, runtime, cluster } = sources;
  metrics.setQueuedRunsSource(async () =>
    (await runs.queuedByApp()).map((q) => ({ labels: { app: `${q.projectId}/${q.appId}` }, value: q.count }))
  );
  metrics.setCapacitySource(() => {
    const { total, reserved, gpus } = runtime.hostCapacity();
    return {
      waiting: runtime.waitingForCapacity().map(({ app, replicas }) => ({ labels: { app }, value: replicas })),
      host: [
        { labels: { resource: "cpu", kind: "total" }, value: total.cpu },
        { labels: { resource: "cpu", kind: "reserved" }, value: reserved.cpu },
        { labels: { resource: "memory_bytes", kind: "total" }, value: total.memoryBytes },
        { labels: { resource: "memory_bytes", kind: "reserved" }, value: reserved.memoryBytes },
        { labels: { resource: "gpus", kind: "total" }, value: gpus.total },
        { labels: { resource: "gpus", kind: "reserved" }, value: gpus.held },
      ],
    };
  });
  metrics.setReplicasSource(() =>
    runtime.replicaStates().flatMap(({ app, ...states }) =>
      Object.entries(states).map(([state, value]) => ({ labels: { app, state }, value }))
    )
  );
  if (cluster) {
    const { registry } = cluster;
    metrics.setClusterSource(() => {
      const { seats, calls } = seatCounts(registry.view());
      return {
        seats: seats.map(({ app, host, state, count }) => ({ labels: { app, host, state }, value: count })),
        calls: calls.map(({ app, host, count }) => ({ labels: { app, host }, value: count })),
      };
    });
  }
}

/** Rethrows a missing or wrong master key as the bad setting it is (exit 2 at start); anything else as is. */
function asConfigError(error: unknown): never {
  if (error instanceof MasterKeyError) throw new ConfigError([error.message]);
  throw error;
}
