/**
 * The runtime: deployed apps and their warm replicas. `invoke` runs one call of an app's function and
 * resolves with a JSON result or a stream of items; failures are typed (`RunFailure`, or a
 * `ProblemError` for a missing app or function, a full queue, an app that failed to load). Free of HTTP,
 * so the synchronous handler and a durable async dispatcher call it the same way.
 */
import { replicaStarts } from "./_replica_starts.ts";
import { appInfos, appSettings, hostCapacity, replicaStates, waitingForCapacity } from "./_runtime_views.ts";
import { addSeat, canPlace, dropSeats, heldSeats, spareSeats } from "./_app_seats.ts";
import { invokeApp } from "./_call_placement.ts";
import { connectAppWebSocket } from "./_websocket_placement.ts";
import { tryChannelSlot } from "./_channel_slots.ts";
import { prepareHarness } from "./_harness_bytecode.ts";
import { HostBudget } from "./_host_budget.ts";
import { LiveApps } from "./_live_apps.ts";
import type { BatchReport, PythonReplica } from "./_python_replica.ts";
import type { CallableReplica } from "./_replica.ts";
import { disabledCgroups, unjailedSandbox } from "../sandbox/mod.ts";
import { SeatBook } from "./_seat_book.ts";
import { stageApp } from "./_stage.ts";
import type { Runtime, RuntimeOptions } from "./_types.ts";

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
export { envNameProblem, envValueProblem } from "./_app_env.ts";
export type { AppSource, DeployedApp, UnservedApp } from "./_app_registry.ts";
export { NoSeatError, postOnly } from "./_call_placement.ts";
export { pipEntryProblem } from "./_dependency_rules.ts";
export {
  AppStartError,
  failureFromRunError,
  RunFailure,
  type RunErrorType,
  type RunFailureOptions,
} from "./_failures.ts";
export { BOOTSTRAP, currentHarness, type Harness, prepareHarness, WORKER_PATH } from "./_harness_bytecode.ts";
export type { HardwareNeed } from "./_host_budget.ts";
export type { CallOutcome, HttpCall, StreamItem } from "./_outcome.ts";
export { type ProcessExit, signalGroup } from "./_process_group.ts";
export { type OutputLine, PythonReplica, type ReplicaExit } from "./_python_replica.ts";
export type { CallableReplica, ReplicaCall } from "./_replica.ts";
export { interpreterHome } from "./_replica_jail.ts";
export type { Capacity, ReplicaGpus, ReplicaStates } from "./_replica_pool.ts";
export { ReplicaTemplate } from "./_replica_template.ts";
export type { HeldSeat } from "./_seat_book.ts";
export type {
  AppInfo,
  AppSettings,
  AppWebSocket,
  ChannelSlot,
  ExternalRuntimeOptions,
  InvokeRequest,
  ProjectEnvironment,
  Runtime,
  RuntimeOptions,
  SeatRef,
  SlotLease,
  StagedVersion,
  StageOptions,
  WebSocketRequest,
} from "./_types.ts";
export type { WorkerProcess } from "./_worker_process.ts";

/**
 * Creates the runtime over `appsDir`; call `start()` before serving. It composes the apps it serves
 * (`LiveApps`: loading, reloading, admission, the pools) with placing calls, channel slots, seats and views.
 */
export function createRuntime(appsDir: string, runtimeOptions: RuntimeOptions): Runtime {
  const batchListeners: Array<(app: string, batch: BatchReport) => void> = [];
  const options = {
    ...runtimeOptions,
    onBatch(app: string, batch: BatchReport) {
      runtimeOptions.onBatch?.(app, batch);
      for (const listener of batchListeners) listener(app, batch);
    },
    sandbox: runtimeOptions.sandbox ?? unjailedSandbox(),
    cgroups: runtimeOptions.cgroups ?? disabledCgroups(),
    budget: new HostBudget(runtimeOptions.host ?? { cpu: Infinity, memoryBytes: Infinity }, {
      gpus: runtimeOptions.gpus,
    }),
    seats: new SeatBook(),
    pythonReplicas: new WeakMap<CallableReplica, PythonReplica>(),
  };
  const apps = new LiveApps(appsDir, options);
  const reload = () => apps.reload();

  return {
    async start() {
      // The harness's bytecode is made while the apps load; a replica started meanwhile waits for it.
      const harness = prepareHarness({ logger: options.logger });
      await apps.start();
      await harness;
    },
    reload,
    stage: (app, stageOptions) => stageApp(apps, app, stageOptions),
    invoke: (request) => invokeApp(apps, request),
    connectWebSocket: (request) => connectAppWebSocket(apps, request),
    listenBatches: (listener) => void batchListeners.push(listener),
    tryAcquireSlot(projectId, app) {
      return apps.live(projectId, app).pool.tryAcquire();
    },
    tryChannelSlot(projectId, app) {
      return tryChannelSlot(apps, { projectId, app });
    },
    capacity(projectId, app) {
      return apps.live(projectId, app).pool.capacity();
    },
    async warm() {
      await Promise.all([...apps.apps.values()].map((live) => live.pool?.warm()));
    },
    async findApp(projectId, app) {
      await apps.liveOrLoad(projectId, app);
      return this.appSettings(projectId, app);
    },
    appSettings(projectId, app) {
      return appSettings(apps, { projectId, app });
    },
    apps(projectId) {
      return appInfos(apps, { projectId, replicaStates: this.replicaStates() });
    },
    admissionProblem: (projectId, app, config) => apps.admissionProblem(projectId, app, config),
    canPlace(projectId, app) {
      return canPlace(apps, { projectId, app });
    },
    addSeat: (ref) => addSeat(apps, ref),
    dropSeats: (refs) => dropSeats(apps, refs),
    heldSeats: () => heldSeats(apps),
    spareSeats: () => spareSeats(apps),
    hostCapacity: () => hostCapacity(apps),
    waitingForCapacity: () => waitingForCapacity(apps),
    replicaStates: () => replicaStates(apps),
    replicaStarts: () => replicaStarts(apps),
    close: () => apps.close(),
  };
}
