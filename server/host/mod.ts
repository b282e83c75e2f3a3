/**
 * A host of several HTTP processes (`RUNPLANE_WORKERS` > 1): the supervisor (the node:cluster primary),
 * which alone runs replicas and the store's background work, and its workers, which share the port.
 */
export { isWorkerDrain } from "./_messages.ts";
export { startSupervisor, type Supervisor } from "./supervisor.ts";
export { serveAsWorker } from "./worker.ts";
