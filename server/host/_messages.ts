/** What the supervisor and its workers say to each other over node:cluster's IPC channel. */
import type { HostFacts } from "../mod.ts";

/** The supervisor's first word to a new worker: where to hand calls, what to say first, what the host has. */
export interface WorkerSetup {
  runplane: "worker-setup";
  socketPath: string;
  /** The supervisor's host id: the host a worker shows itself as (`getApp`'s replicas per host). */
  hostId: string;
  /** What a worker says first on each connection to the socket: 32 random bytes, hex. */
  callTokenHex: string;
  facts: HostFacts;
}

/** A worker asks for its setup once it listens for it (a message sent before would be lost). */
export interface WorkerAsks {
  runplane: "worker-asks";
}

/** The supervisor asks a worker to drain (as SIGTERM would) and exit. */
export interface WorkerDrain {
  runplane: "drain";
}

export function isWorkerSetup(message: unknown): message is WorkerSetup {
  return (message as WorkerSetup | null)?.runplane === "worker-setup";
}

export function isWorkerAsks(message: unknown): message is WorkerAsks {
  return (message as WorkerAsks | null)?.runplane === "worker-asks";
}

export function isWorkerDrain(message: unknown): message is WorkerDrain {
  return (message as WorkerDrain | null)?.runplane === "drain";
}
