/** What the supervisor and its workers say to each other over node:cluster's IPC channel. */
import type { ReplicaExit } from "../runtime/mod.ts";
import type { HostFacts } from "./role.ts";

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

/**
 * The supervisor hands a worker one channel of a Python replica (the socket travels with the message):
 * the worker calls the replica directly on it while the supervisor gives it slots (`replica_channels.ts`).
 */
export interface ReplicaChannelHanded {
  runplane: "replica-channel";
  /** The replica's channel id, as slots name it. */
  replica: number;
  /** The app version it serves (for logs). */
  label: string;
  /** Its process's pid on the host, when known. */
  pid?: number;
}

/** A replica whose channel a worker holds has ended: how, as its calls in flight are to be told. */
export interface ReplicaChannelExited {
  runplane: "replica-exit";
  replica: number;
  exit: ReplicaExit;
}

/** A worker asks the supervisor to kill a replica it holds a channel of (a call past its time, a broken protocol). */
export interface ReplicaKill {
  runplane: "replica-kill";
  replica: number;
  /** Only if one call is in it (a cancelled call that did not stop): others are not failed for it. */
  ifAlone?: boolean;
}

export function isReplicaChannelHanded(message: unknown): message is ReplicaChannelHanded {
  const m = message as ReplicaChannelHanded | null;
  return m?.runplane === "replica-channel" && Number.isSafeInteger(m.replica);
}

export function isReplicaChannelExited(message: unknown): message is ReplicaChannelExited {
  const m = message as ReplicaChannelExited | null;
  return m?.runplane === "replica-exit" && Number.isSafeInteger(m.replica) && typeof m.exit?.reason === "string";
}

export function isReplicaKill(message: unknown): message is ReplicaKill {
  const m = message as ReplicaKill | null;
  return m?.runplane === "replica-kill" && Number.isSafeInteger(m.replica);
}
