/**
 * The supervisor of a host with workers (`RUNPLANE_WORKERS` > 1), the node:cluster primary. It is the
 * whole server of one process, taking its workers' calls on a Unix socket in the data dir instead of
 * the port (`_call_wire.ts`): it alone runs replicas, templates, sandboxes, cgroups and GPUs, builds,
 * webhook deliveries, async runs and the store's upkeep. It forks the workers, which share the port,
 * hands each the socket and the token to say on it, passes wake-ups between them (SQLite), starts a new
 * worker when one dies, and drains them all before itself.
 */
import cluster, { type Worker } from "node:cluster";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "../log.ts";
import { isRelayedWakeUp, type RelayedWakeUp, type WakeUpPort } from "../store/mod.ts";
import { isReplicaKill, isWorkerAsks, type WorkerDrain, type WorkerSetup } from "./_messages.ts";
import { ReplicaChannels } from "./replica_channels.ts";
import { serveHostMetrics } from "./host_metrics.ts";
import type { HostServer, SupervisorRole } from "./role.ts";
import { sendSnapshots } from "./runtime_view.ts";
import { answerTicketMint } from "./ticket_relay.ts";
import { takeHandoffs } from "./websocket_handoff.ts";

/** A worker that dies sooner than this after its start waits this long before it is started again. */
const RESPAWN_PAUSE_MS = 1_000;

/** A started host: its supervisor's server, and its workers serving the port. */
export interface Supervisor<S extends HostServer = HostServer> {
  server: S;
  /** The URL the workers serve, once the first one listens. */
  url: string;
  /** The workers' process ids now. */
  workerPids(): number[];
  /**
   * Drains every worker (each as on SIGTERM), then the supervisor; resolves once all have stopped.
   * Called again while draining, it cuts every drain short (as a second SIGTERM does).
   */
  drain(): Promise<void>;
}

/** Wake-ups to and from every worker: one worker's go to the supervisor and to the others. */
function workersPort(): WakeUpPort & { fromWorker(worker: Worker, wakeUp: RelayedWakeUp): void } {
  const listeners = new Set<(wakeUp: RelayedWakeUp) => void>();
  function sendAll(wakeUp: RelayedWakeUp, except?: Worker): void {
    for (const worker of Object.values(cluster.workers ?? {})) {
      if (worker && worker !== except && worker.isConnected()) worker.send(wakeUp);
    }
  }
  return {
    send: (wakeUp) => sendAll(wakeUp),
    receive(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    fromWorker(worker, wakeUp) {
      for (const listener of listeners) listener(wakeUp);
      sendAll(wakeUp, worker);
    },
  };
}

/** Options of `startSupervisor`. */
export interface SupervisorOptions<S extends HostServer> {
  /**
   * Makes the supervisor's own server for its role (`server/main.ts` hands it `createServer` with the
   * settings): the supervisor never imports the composition root.
   */
  createServer(role: SupervisorRole): Promise<S>;
  /** The data dir: the workers hand calls to `<dataDir>/supervisor.sock`. */
  dataDir: string;
  /** How many workers serve the port (`RUNPLANE_WORKERS`). */
  workers: number;
  logger: Logger;
}

/**
 * Starts the supervisor's server on `<dataDir>/supervisor.sock` and `workers` workers. Resolves once
 * every worker listens. Call in the node:cluster primary; the workers run the same entry, which calls
 * `serveAsWorker` (see `serve`).
 */
export async function startSupervisor<S extends HostServer>(options: SupervisorOptions<S>): Promise<Supervisor<S>> {
  const { logger } = options;
  const socketPath = join(options.dataDir, "supervisor.sock");
  const callToken = randomBytes(32);
  const port = workersPort();
  // Each Python replica gets a channel per worker, which calls it directly (replica_channels.ts).
  const channels = new ReplicaChannels({ workers: options.workers, logger });
  const server = await options.createServer({ kind: "supervisor", socketPath, callToken, relay: port, channels });
  await server.listen();
  const { context } = server;
  const setup: WorkerSetup = {
    runplane: "worker-setup",
    socketPath,
    callTokenHex: callToken.toString("hex"),
    hostId: context.host.id,
    facts: { sandbox: context.sandbox, cgroups: context.cgroups, gpus: context.gpus },
  };
  let stopping = false;
  const started = new Map<number, number>();
  const stopServingMetrics = serveHostMetrics(context.metrics.registry);
  const snapshots = sendSnapshots(context.runtime, (snapshot) => {
    for (const worker of liveWorkers()) if (worker.isConnected()) worker.send(snapshot);
  }, { clusterView: context.cluster?.view });
  // The WebSockets the workers take are handled here, where the replicas are (websocket_handoff.ts).
  const handoffs = takeHandoffs({
    upgrade: server.upgrades.handle,
    onDropped: (worker, why) => logger.warn({ worker_pid: worker.process.pid, why }, "a WebSocket handoff was dropped"),
  });
  const mintTicket = context.websocketTickets.mint.bind(context.websocketTickets);

  function fork(): Worker {
    const worker = cluster.fork();
    started.set(worker.id, Date.now());
    // A message to a worker that is going away fails with an 'error' event, which would throw unheard.
    worker.on(
      "error",
      (error: Error) => logger.warn({ err: error, worker_pid: worker.process.pid }, "a message to a worker failed"),
    );
    worker.on("message", (message: unknown, handle: unknown) => {
      if (handoffs.receive(worker, message, handle) || answerTicketMint(worker, message, mintTicket)) return;
      if (isRelayedWakeUp(message)) port.fromWorker(worker, message);
      else if (isReplicaKill(message)) channels.kill(message);
      else if (isWorkerAsks(message)) {
        worker.send(setup);
        snapshots.resend();
        channels.workerReady(worker);
      }
    });
    return worker;
  }

  let ready = false;
  let failedToStart = (_error: Error) => {};
  cluster.on("exit", (worker, code, signal) => {
    channels.workerGone(worker);
    const lived = Date.now() - (started.get(worker.id) ?? 0);
    started.delete(worker.id);
    if (stopping) return;
    // Before every worker listened, a death is a start that fails (the port taken, say): no retry loop.
    if (!ready) return failedToStart(new Error(`A worker exited before it listened (code ${code}, signal ${signal})`));
    logger.error(
      { worker_pid: worker.process.pid, code, signal },
      "a worker died; its calls in flight were cut, and another takes its place",
    );
    setTimeout(() => !stopping && fork(), lived < RESPAWN_PAUSE_MS ? RESPAWN_PAUSE_MS : 0);
  });

  const listening = workersListening(options.workers, (reject) => (failedToStart = reject));
  for (let i = 0; i < options.workers; i++) fork();
  let url: string;
  try {
    url = await listening;
    ready = true;
  } catch (error) {
    stopping = true;
    snapshots.stop();
    stopServingMetrics();
    for (const worker of liveWorkers()) worker.process.kill("SIGKILL");
    await server.close();
    throw error;
  }
  logger.info({ url, workers: options.workers }, "listening");

  let drained: Promise<void> | undefined;
  async function drain(): Promise<void> {
    stopping = true;
    snapshots.stop();
    const exited = liveWorkers().map(exitOf);
    tellWorkersToDrain();
    // The supervisor drains beside them: its seats (on a host of a cluster) and its async dispatch stop
    // at once, and it stops its replicas only once every worker's connection to it has closed (a worker
    // closes it as it exits, its calls answered) and its own runs have settled.
    // A worker stops once the sockets it handed over have closed (Node's own bookkeeping of handed
    // sockets): the WebSockets were told 1001 when the drain's timeout ended, and what is left goes now.
    await Promise.all([server.drain().finally(() => handoffs.destroyAll()), ...exited]);
  }

  return {
    server,
    url,
    workerPids: () => liveWorkers().flatMap((w) => w.process.pid ?? []),
    drain() {
      if (drained) {
        // A second word: every drain is cut short (a worker reads a second "drain" as a second SIGTERM).
        tellWorkersToDrain();
        void server.drain();
        return drained;
      }
      drained = drain();
      return drained;
    },
  };
}

/** The host's workers alive now. */
function liveWorkers(): Worker[] {
  return Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
}

/** Asks every worker to drain; a second word cuts its drain short. */
function tellWorkersToDrain(): void {
  const message: WorkerDrain = { runplane: "drain" };
  for (const worker of liveWorkers()) if (worker.isConnected()) worker.send(message);
}

/** Resolves once `worker` has exited (at once if it has). */
function exitOf(worker: Worker): Promise<void> {
  return new Promise<void>((resolve) => {
    if (worker.isDead()) return resolve();
    worker.once("exit", () => resolve());
  });
}

/**
 * Resolves with the URL the workers serve once `count` of them listen; `onReject` is given the way to
 * fail it (a worker that exits before every one listened).
 */
function workersListening(count: number, onReject: (reject: (error: Error) => void) => void): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    onReject(reject);
    let listened = 0;
    let url = "";
    cluster.on("listening", (_worker, address) => {
      url ||= `http://${
        address.address && address.address !== "0.0.0.0" ? address.address : "127.0.0.1"
      }:${address.port}`;
      if (++listened === count) resolve(url);
    });
  });
}
