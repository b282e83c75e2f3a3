/**
 * The part a server process plays on a host with workers (`RUNPLANE_WORKERS` > 1), and what the
 * supervisor and its workers need of the server they run. The supervisor and the workers build their
 * role here and hand it to the server maker `server/main.ts` gives them; the placement layer
 * (`server/placement/`) reads it to choose this process's executors.
 */
import type { Socket } from "node:net";
import type { ClusterView } from "../cluster/mod.ts";
import type { GpuInventory } from "../gpus/mod.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { ExecutedCall, ExecuteRequest } from "../runs/mod.ts";
import type { OutputLine, PythonReplica, Runtime } from "../runtime/mod.ts";
import type { CgroupStatus, SandboxStatus } from "../sandbox/mod.ts";
import type { WakeUpPort } from "../store/mod.ts";
import type { ChannelSlots } from "./call_server.ts";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";

/**
 * A process of a host with workers. The supervisor is today's whole server, listening on a Unix socket
 * only: it runs the replicas, builds, deliveries and the store's upkeep, grants its workers slots on its
 * replicas, and runs the calls they hand it. A worker serves the port: it verifies, validates and
 * records, and calls a replica on its channel or hands the call to the supervisor; it starts no replica,
 * claims no async run and no build.
 */
export type HostRole =
  | {
    kind: "supervisor";
    /** Where the workers hand it calls (`server/host/_call_wire.ts`). */
    socketPath: string;
    /** What a worker says first on that socket. */
    callToken: Uint8Array;
    relay: WakeUpPort;
    /** Its Python replicas' channels, handed to the workers to call them directly, and their slots. */
    channels?: HostChannels;
  }
  | {
    kind: "worker";
    relay: WakeUpPort;
    facts: HostFacts;
    /** The supervisor's host id: the host this worker is part of. */
    hostId: string;
    /** On a host of a cluster: the supervisor's view of the cluster, as it last sent it. */
    clusterView(): ClusterView | undefined;
    /** Its number among the host's workers (node:cluster's id), sent as `X-Runplane-Worker`. */
    id: number;
    /** Whether the supervisor is still there (its IPC channel open). */
    connected(): boolean;
    /** `local` (the worker's own runtime, which runs nothing) with the supervisor's replicas shown. */
    viewRuntime(local: Runtime): Runtime;
    /**
     * Runs a call: on a replica's channel when the supervisor has a slot free now, else handed to the
     * supervisor, which runs it on its replicas or, on a host of a cluster, where the cluster has room;
     * `here`: a call another host forwarded, run on this host's replicas only.
     */
    forward(request: ExecuteRequest, options?: { here?: boolean }): Promise<ExecutedCall>;
    /** Given where the output of the calls it makes on replicas' channels goes (the run log). */
    useRunLogs?(add: (line: OutputLine) => void): void;
    /** Its `upgrade` listener: hands each WebSocket to the supervisor, which handles it (`websocket_handoff.ts`). */
    handOffUpgrade: UpgradeListener;
    /** Mints a WebSocket ticket in the supervisor's book, where the upgrades are handled (`ticket_relay.ts`). */
    mintTicket(target: RelayedTicketTarget): Promise<RelayedTicket | null>;
  };

/** An upgrade listener (`WebSocketUpgrades.handle`); it settles once the upgrade is accepted or refused. */
export type UpgradeListener = (request: IncomingMessage, socket: Duplex, head: Buffer) => void | Promise<void>;

/** A WebSocket ticket minted (`ticket_relay.ts`): pass `ticket` as `?ticket=` before `expiresAt`. */
export interface RelayedTicket {
  ticket: string;
  expiresAt: number;
}

/** What a WebSocket ticket is for. */
export interface RelayedTicketTarget {
  projectId: string;
  appId: string;
}

/** A supervisor's replicas' channels (`server/host/replica_channels.ts`), as the server wires them. */
export interface HostChannels extends ChannelSlots {
  /** The runtime's `replicaChannels` option. */
  runtimeOption(): { count: number; onChannels(replica: PythonReplica, channels: readonly Socket[]): void };
  /** The runtime whose slots the workers are granted. */
  attach(runtime: Runtime): void;
}

/** What a worker shows of its host (`/readyz`): the supervisor's sandbox, cgroups and GPUs, as it started them. */
export interface HostFacts {
  sandbox: SandboxStatus;
  cgroups: CgroupStatus;
  gpus: GpuInventory;
}

/** The supervisor's role. */
export type SupervisorRole = Extract<HostRole, { kind: "supervisor" }>;

/** A worker's role. */
export type WorkerRole = Extract<HostRole, { kind: "worker" }>;

/**
 * What the supervisor and a worker use of the server they run (`RunplaneServer` of `server/mod.ts` is
 * one): they are handed a function that makes it, so that `server/host/` never imports the composition root.
 */
export interface HostServer {
  context: {
    host: { id: string };
    sandbox: SandboxStatus;
    cgroups: CgroupStatus;
    gpus: GpuInventory;
    metrics: Metrics;
    runtime: Runtime;
    cluster: { view(): ClusterView } | null;
    /** The WebSocket tickets it holds: the supervisor's are the host's (`ticket_relay.ts`). */
    websocketTickets: { mint(target: RelayedTicketTarget): Promise<RelayedTicket | null> };
  };
  /** Its WebSocket runs' upgrade listener: a supervisor handles there the upgrades its workers hand it. */
  upgrades: { handle: UpgradeListener };
  /** Starts listening (a supervisor: on its Unix socket); resolves with its URL. */
  listen(): Promise<string>;
  /** Drains (see `RunplaneServer.drain`); `timeoutMs` 0 stops what still runs at once. */
  drain(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}
