/**
 * A worker of a host (`RUNPLANE_WORKERS` > 1), a node:cluster child sharing the port with the others. It
 * is a server that verifies, validates, records and answers, and hands every call to its supervisor
 * over the supervisor's Unix socket (the cluster's forwarding protocol, signed with the key the
 * supervisor gave it); it starts no replica, claims no async run and no build.
 */
import cluster from "node:cluster";
import { Agent } from "undici";
import { forwardCall, ForwardKey, forwardKey } from "../cluster/mod.ts";
import type { Config } from "../config.ts";
import { createServer, type CreateServerOptions, type RunplaneServer } from "../mod.ts";
import { isRelayedWakeUp, type WakeUpPort } from "../store/mod.ts";
import { isWorkerSetup, type WorkerAsks, type WorkerSetup } from "./_messages.ts";
import { isRuntimeSnapshot, type RuntimeSnapshot, viewedRuntime } from "./runtime_view.ts";

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

/** Creates this worker's server once the supervisor said where it is, and listens on the shared port. */
export async function serveAsWorker(
  config: Config,
  options: CreateServerOptions = {},
): Promise<{ server: RunplaneServer; url: string }> {
  // The supervisor's replicas as it last told them (see runtime_view.ts).
  let latest: RuntimeSnapshot | undefined;
  process.on("message", (message) => {
    if (isRuntimeSnapshot(message)) latest = message;
  });
  const setup = await setupMessage();
  const key = setup.forwardKeyHex
    ? new ForwardKey(Buffer.from(setup.forwardKeyHex, "hex"))
    : forwardKey(config.masterKey!);
  // One pool of kept-alive connections to the supervisor; no body timeout, as between hosts.
  const dispatcher = new Agent({
    connect: { socketPath: setup.socketPath },
    keepAliveTimeout: 60_000,
    headersTimeout: 60_000,
    bodyTimeout: 0,
  });
  const server = await createServer(config, {
    ...options,
    role: {
      kind: "worker",
      id: cluster.worker?.id ?? 0,
      socketPath: setup.socketPath,
      forwardKey: key,
      relay: supervisorPort,
      facts: setup.facts,
      connected: () => process.connected === true,
      viewRuntime: (local) => viewedRuntime(local, () => latest),
      forward: (request, { now }) => forwardCall("http://supervisor", request, { key, dispatcher, now }),
    },
  });
  const url = await server.listen();
  return { server, url };
}
