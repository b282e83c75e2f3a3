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

/**
 * A worker hands the supervisor a WebSocket upgrade it took on the port: the socket travels with the
 * message (`websocket_handoff.ts`), and this is the request as the worker read it.
 */
export interface WebSocketHandoff {
  runplane: "websocket-handoff";
  method: string;
  url: string;
  /** Node's `rawHeaders`: names and values in turn, as received. */
  rawHeaders: string[];
  remoteAddress: string;
  /** The bytes after the request's head that the worker had read (the `upgrade` event's `head`), base64. */
  headBase64: string;
}

/** A worker asks the supervisor, which holds the host's tickets, to mint one (`ticket_relay.ts`). */
export interface TicketMint {
  runplane: "ticket-mint";
  id: number;
  projectId: string;
  appId: string;
}

/** The supervisor's answer to `TicketMint` `id`: the ticket, or null (its project holds too many). */
export interface TicketMinted {
  runplane: "ticket-minted";
  id: number;
  minted: { ticket: string; expiresAt: number } | null;
}

/** The most characters of a handoff's URL, its headers together, and its head bytes (base64). */
const HANDOFF_LIMITS = { url: 16_384, headers: 65_536, head: 87_384 };

export function isWebSocketHandoff(message: unknown): message is WebSocketHandoff {
  const m = message as WebSocketHandoff | null;
  if (m?.runplane !== "websocket-handoff") return false;
  if (typeof m.method !== "string" || m.method.length > 16) return false;
  if (typeof m.url !== "string" || m.url.length > HANDOFF_LIMITS.url) return false;
  if (typeof m.remoteAddress !== "string" || m.remoteAddress.length > 64) return false;
  if (typeof m.headBase64 !== "string" || m.headBase64.length > HANDOFF_LIMITS.head) return false;
  const headers = m.rawHeaders;
  if (!Array.isArray(headers) || headers.length % 2 !== 0 || headers.length > 400) return false;
  let total = 0;
  for (const part of headers) {
    if (typeof part !== "string") return false;
    total += part.length;
  }
  return total <= HANDOFF_LIMITS.headers;
}

export function isTicketMint(message: unknown): message is TicketMint {
  const m = message as TicketMint | null;
  return m?.runplane === "ticket-mint" && Number.isSafeInteger(m.id) && typeof m.projectId === "string"
    && m.projectId.length <= 64 && typeof m.appId === "string" && m.appId.length <= 64;
}

export function isTicketMinted(message: unknown): message is TicketMinted {
  const m = message as TicketMinted | null;
  if (m?.runplane !== "ticket-minted" || !Number.isSafeInteger(m.id)) return false;
  return m.minted === null || (typeof m.minted?.ticket === "string" && typeof m.minted.expiresAt === "number");
}
