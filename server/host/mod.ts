/**
 * A host of several HTTP processes (`RUNPLANE_WORKERS` > 1): the supervisor (the node:cluster primary),
 * which alone runs replicas and the store's background work, and its workers, which share the port.
 */
export { isWorkerDrain } from "./_messages.ts";
export { listenForWorkerCalls, type WorkerCallsServer } from "./call_server.ts";
export type { HostChannels, HostFacts, HostRole, HostServer, SupervisorRole, WorkerRole } from "./role.ts";
export { startSupervisor, type Supervisor, type SupervisorOptions } from "./supervisor.ts";
export { serveAsWorker, type WorkerOptions } from "./worker.ts";
