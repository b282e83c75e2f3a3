/** The part a server process plays on a host with workers (`RUNPLANE_WORKERS` > 1; see server/host/). */
import type { Socket } from "node:net";
import type { ClusterView } from "./cluster/mod.ts";
import type { ChannelSeats } from "./host/call_server.ts";
import type { ServerContext } from "./context.ts";
import type { GpuInventory } from "./gpus/mod.ts";
import type { ExecutedCall, ExecuteRequest } from "./runs/mod.ts";
import type { OutputLine, PythonReplica, Runtime } from "./runtime/mod.ts";
import type { WakeUpPort } from "./store/mod.ts";

/**
 * A process of a host with workers. The supervisor is today's whole server, listening on a Unix socket
 * only: it runs the replicas, builds, deliveries and the store's upkeep, grants its workers seats on its
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
    /** Its Python replicas' channels, handed to the workers to call them directly, and their seats. */
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
     * Runs a call: on a replica's channel when the supervisor has a seat free now, else handed to the
     * supervisor, which runs it on its replicas or, on a host of a cluster, where the cluster has room;
     * `here`: a call another host forwarded, run on this host's replicas only.
     */
    forward(request: ExecuteRequest, options?: { here?: boolean }): Promise<ExecutedCall>;
    /** Given where the output of the calls it makes on replicas' channels goes (the run log). */
    useRunLogs?(add: (line: OutputLine) => void): void;
  };

/** A supervisor's replicas' channels (`server/host/replica_channels.ts`), as the server wires them. */
export interface HostChannels extends ChannelSeats {
  /** The runtime's `replicaChannels` option. */
  runtimeOption(): { count: number; onChannels(replica: PythonReplica, channels: readonly Socket[]): void };
  /** The runtime whose slots become seats. */
  attach(runtime: Runtime): void;
}

/** What a worker shows of its host (`/readyz`): the supervisor's sandbox, cgroups and GPUs, as it started them. */
export interface HostFacts {
  sandbox: ServerContext["sandbox"];
  cgroups: ServerContext["cgroups"];
  gpus: GpuInventory;
}
