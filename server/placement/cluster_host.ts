/**
 * This process as a host of a cluster (issue 31, `RUNPLANE_ADVERTISE_URL` on PostgreSQL): its registry
 * (host row, seats, the cached view), the executor that routes calls to warm capacity, and the upkeep
 * that keeps the seats true: the warm ones claimed, the spare ones given back, the lost ones dropped.
 */
import {
  type ClusterRegistry,
  createClusterRegistry,
  type ForwardKey,
  forwardCall,
  forwardWebSocket,
} from "../cluster/mod.ts";
import { type ClusterExecutor, clusterExecutor } from "./_cluster_executor.ts";
import { type ClusterWebSockets, clusterWebSockets } from "./_cluster_websockets.ts";
import type { Logger } from "../log.ts";
import type { Runtime } from "../runtime/mod.ts";
import type { Store } from "../store/mod.ts";

/** How often the upkeep looks for warm seats to claim and spare ones to give back. */
const UPKEEP_MS = 1_000;

/** Options of `createClusterHost`. */
export interface ClusterHostOptions {
  store: Store;
  runtime: Runtime;
  logger: Logger;
  /** This process's id (its leases' owner): its host id. */
  hostId: string;
  /** Its advertised base URL. */
  url: string;
  capacity: { cpu: number; memoryBytes: number; gpus: number };
  /** A host silent this long loses its seats (`RUNPLANE_RUN_LEASE`). */
  leaseMs: number;
  forwardKey: ForwardKey;
}

/** A started cluster host. */
export interface ClusterHost {
  registry: ClusterRegistry;
  executor: ClusterExecutor;
  /** Where its WebSockets open: here, or on another host's replica (issue 47). */
  webSockets: ClusterWebSockets;
  /** Signs and checks the hop to other hosts; `now` is the store's clock the credentials' time is read from. */
  hop: { key: ForwardKey; now(): number };
  /** Registers the host and starts its upkeep. */
  start(): Promise<void>;
  /** Stops the upkeep and removes the host and its seats from the store (once; later calls share it). */
  stop(): Promise<void>;
}

/** Creates the cluster host; `runtime` must be seated and tell its load changes to `registry.changed()`. */
export function createClusterHost(options: ClusterHostOptions): ClusterHost {
  const { store, runtime, logger } = options;
  const registry = createClusterRegistry({
    db: store.db,
    now: store.clock.now,
    notifier: store.notifier,
    logger,
    hostId: options.hostId,
    url: options.url,
    capacity: options.capacity,
    leaseMs: options.leaseMs,
    seatStates: () => runtime.heldSeats(),
    onSeatsLost(lost) {
      logger.warn(
        { seats: lost },
        "another host took over seats of this one (it missed its lease); their replicas stop",
      );
      runtime.dropSeats(lost);
    },
  });
  const executor = clusterExecutor({
    runtime,
    registry,
    logger,
    forward: (url, request) => forwardCall(url, request, { key: options.forwardKey, now: store.clock.now }),
  });
  const webSockets = clusterWebSockets({
    runtime,
    registry,
    logger,
    forward: (url, request) => forwardWebSocket(url, request, { key: options.forwardKey, now: store.clock.now }),
  });
  let timer: ReturnType<typeof setInterval> | undefined;
  let stopped: Promise<void> | undefined;
  let upkeep: Promise<void> | undefined;
  let stopView = () => {};
  /** One round at a time: warm seats claimed, spare ones released. A store error waits for the next round. */
  function runUpkeep(): void {
    upkeep ??= executor.releaseSpare().then(() => executor.keepWarm()).catch((error) =>
      logger.warn({ err: error }, "the cluster upkeep failed; it runs again in a second")
    ).finally(() => (upkeep = undefined));
  }
  return {
    registry,
    executor,
    webSockets,
    hop: { key: options.forwardKey, now: store.clock.now },
    async start() {
      await registry.start();
      stopView = registry.onViewChange(runUpkeep);
      timer = setInterval(runUpkeep, UPKEEP_MS);
      timer.unref();
      runUpkeep();
    },
    stop() {
      stopped ??= (async () => {
        clearInterval(timer);
        stopView();
        await upkeep;
        await registry.stop();
      })();
      return stopped;
    },
  };
}
