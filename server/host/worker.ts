/**
 * A worker of a host (`RUNPLANE_WORKERS` > 1), a node:cluster child sharing the port with the others. It
 * is a server that verifies, validates, records and answers. It calls a Python replica directly on the
 * channel its supervisor handed it, with a slot the supervisor grants (`channel_calls.ts`), or hands the
 * call over, both over the supervisor's Unix socket (`_call_wire.ts`, with the token the supervisor gave
 * it); it starts no replica, claims no async run and no build.
 */
import cluster from "node:cluster";
import type { Logger } from "../log.ts";
import { isRelayedWakeUp, type WakeUpPort } from "../store/mod.ts";
import { SupervisorCalls } from "./call_client.ts";
import { WorkerChannels } from "./channel_calls.ts";
import { workerMetrics } from "./host_metrics.ts";
import { isWorkerSetup, type WorkerAsks, type WorkerSetup } from "./_messages.ts";
import type { HostServer, WorkerRole } from "./role.ts";
import { isRuntimeSnapshot, type RuntimeSnapshot, viewedRuntime } from "./runtime_view.ts";
import { askSupervisorForTickets } from "./ticket_relay.ts";
import { handOffToSupervisor } from "./websocket_handoff.ts";

/** The supervisor's setup message, asked for once this process listens for it. */
function setupMessage(): Promise<WorkerSetup> {
  return new Promise((resolve) => {
    function onMessage(message: unknown): void {
      if (!isWorkerSetup(message)) return;
      process.off("message", onMessage);
      resolve(message);
    }
    process.on("message", onMessage);
    const ask: WorkerAsks = { runplane: "worker-asks" };
    process.send?.(ask);
  });
}

/** Wake-ups to and from the supervisor, over this process's IPC channel. */
const supervisorPort: WakeUpPort = {
  send(wakeUp) {
    if (process.connected) process.send?.(wakeUp);
  },
  receive(listener) {
    const onMessage = (message: unknown) => isRelayedWakeUp(message) && listener(message);
    process.on("message", onMessage);
    return () => process.off("message", onMessage);
  },
};

/** Options of `serveAsWorker`. */
export interface WorkerOptions<S extends HostServer> {
  /**
   * Makes this worker's server for its role (`server/main.ts` hands it `createServer` with the
   * settings): a worker never imports the composition root.
   */
  createServer(role: WorkerRole): Promise<S>;
  /** Where the calls it makes on replicas' channels log what goes wrong. */
  logger: Logger;
}

/** Creates this worker's server once the supervisor said where it is, and listens on the shared port. */
export async function serveAsWorker<S extends HostServer>(
  options: WorkerOptions<S>,
): Promise<{ server: S; url: string }> {
  // The supervisor's replicas as it last told them (see runtime_view.ts).
  let latest: RuntimeSnapshot | undefined;
  process.on("message", (message) => {
    if (isRuntimeSnapshot(message)) latest = message;
  });
  // The replicas' channels the supervisor hands this worker (from right after its setup, so listened for
  // before it is asked): calls go straight to a replica on them.
  const channels = new WorkerChannels({
    logger: options.logger,
    send: (message) => process.connected && process.send?.(message, () => undefined),
  });
  process.on("message", (message, handle) => channels.receive(message, handle));
  process.once("disconnect", () => channels.supervisorGone());
  const setup = await setupMessage();
  const workerId = cluster.worker?.id ?? 0;
  const supervisor = new SupervisorCalls(setup.socketPath, { token: setup.callTokenHex, workerId });
  const server = await options.createServer({
    kind: "worker",
    id: workerId,
    hostId: setup.hostId,
    clusterView: () => latest?.cluster ?? undefined,
    relay: supervisorPort,
    facts: setup.facts,
    connected: () => process.connected === true,
    viewRuntime: (local) => viewedRuntime(local, () => latest),
    forward: (request, options) => channels.execute(request, supervisor, options),
    useRunLogs: (add) => (channels.onOutput = add),
    handOffUpgrade: handOffToSupervisor(
      (message, socket, callback) => process.send?.(message, socket, { keepOpen: false }, callback) ?? false,
      { connected: () => process.connected === true },
    ),
    mintTicket: askSupervisorForTickets(),
  });
  // `/metrics` here answers the host's: every process's, summed by the supervisor.
  const { hostText } = workerMetrics(server.context.metrics.registry);
  channels.onCall = (path) => server.context.metrics.workerCalls.inc({ path });
  channels.callable = (projectId, app) => {
    try {
      return server.context.runtime.appSettings(projectId, app).runtime === "python";
    } catch {
      // Not loaded here yet (deployed a moment ago): the supervisor's answer decides.
      return true;
    }
  };
  server.context.metrics.setExposition(hostText);
  const url = await server.listen();
  return { server, url };
}
