/**
 * The placement layer: where a call runs. It sits under the composition root (`server/mod.ts` asks it)
 * and over the domain folders it joins (`runtime/`, `runs/`, `cluster/`, `host/`, `sandbox/`, `gpus/`),
 * which never import it. It owns this process's host parts (sandbox, cgroups, GPUs), whether it takes
 * tenants' code, whether it is a host of a cluster, and which executors serve its calls.
 */
import { type ForwardKey, forwardKey } from "../cluster/mod.ts";
import type { HostRole } from "../host/mod.ts";
import type { MasterKey } from "../keys/mod.ts";
import type { ExecuteRequest, RunExecutor } from "../runs/mod.ts";
import type { Runtime } from "../runtime/mod.ts";
import type { ClusterHost } from "./cluster_host.ts";
import { runtimeExecutor } from "./runtime_executor.ts";

export { type ClusterHost, type ClusterHostOptions, createClusterHost } from "./cluster_host.ts";
export {
  deploymentsRefused,
  refusalReason,
  refuseUnjailedDeployments,
  type SandboxReport,
  sandboxReport,
} from "./deployment_gate.ts";
export { hostParts, type HostParts } from "./host_parts.ts";
export { runtimeExecutor } from "./runtime_executor.ts";

/** Which executors serve this process's calls (see `placeExecutors`). */
export interface Executors {
  /**
   * The runs' executor: the sync, stream and async calls this process records, and (a supervisor) the
   * calls its workers hand it on its Unix socket.
   */
  calls: RunExecutor;
  /**
   * Calls another host forwarded here (the internal forward endpoint) and, on a supervisor, the calls a
   * worker hands it with `here` (forwarded to the worker's port): run on this host's replicas only, or on
   * one placed here, never forwarded again.
   */
  forwarded: RunExecutor;
  /** Whether this process claims async runs from the store's queue (the runs' `dispatch`). */
  dispatch: boolean;
}

/** Where `placeExecutors` places: this process's runtime and, on a host of a cluster, its cluster host. */
export interface PlacementParts {
  runtime: Runtime;
  /** Made only when `joinsCluster` gave a key: never on a worker (its supervisor is the host of the cluster). */
  cluster?: ClusterHost;
}

/**
 * For this process's role and whether it is a host of a cluster, which executors serve calls, forwarded
 * calls and dispatch. `local` is `runtimeExecutor(runtime)` (this process's replicas); `cluster` is
 * `cluster.executor`, which routes a call to a local slot, else a warm replica on another host, else a new
 * replica where capacity allows, else a queue; `placing` is `cluster.executor.placing` (here, or a replica
 * placed here; never forwarded again); `worker` is `role.forward`, which calls a Python replica on a
 * channel when the supervisor grants a slot now, else hands the call to the supervisor's Unix socket.
 *
 * | role           | cluster | calls          | forwarded               | dispatch |
 * |----------------|---------|----------------|-------------------------|----------|
 * | single process | no      | local          | local                   | yes      |
 * | single process | yes     | cluster        | placing                 | yes      |
 * | supervisor     | no      | local          | local                   | yes      |
 * | supervisor     | yes     | cluster        | placing                 | yes      |
 * | worker         | no      | worker         | worker, `here`          | no       |
 * | worker         | (yes)   | worker         | worker, `here`          | no       |
 *
 * A worker is never itself a host of a cluster: on a cluster its supervisor is, and a worker's calls
 * reach the cluster through it. A worker's executors answer `freeSlots` and `gracePeriodMs` from its own
 * runtime (which knows the apps and runs nothing); it claims no async run.
 */
export function placeExecutors(role: HostRole | undefined, parts: PlacementParts): Executors {
  const local = runtimeExecutor(parts.runtime);
  if (role?.kind === "worker") {
    return {
      calls: { ...local, execute: (request: ExecuteRequest) => role.forward(request) },
      forwarded: { ...local, execute: (request: ExecuteRequest) => role.forward(request, { here: true }) },
      dispatch: false,
    };
  }
  const { cluster } = parts;
  return { calls: cluster?.executor ?? local, forwarded: cluster?.executor.placing ?? local, dispatch: true };
}

/** What `joinsCluster` reads of the settings and the store. */
export interface ClusterSettings {
  /** `RUNPLANE_ADVERTISE_URL`: where other hosts reach this one. */
  advertiseUrl: string | null;
  /** Whether the store is shared by several processes (PostgreSQL). */
  sharedStore: boolean;
  masterKey: MasterKey | null;
}

/**
 * Whether this process is a host of a cluster (issue 31): with `RUNPLANE_ADVERTISE_URL` on a shared store
 * and a master key, and not a worker (on a host with workers the supervisor is that host; its workers hand
 * it every call). Returns the key that signs the calls it forwards, or null when it is not.
 */
export function joinsCluster(role: HostRole | undefined, settings: ClusterSettings): ForwardKey | null {
  return settings.advertiseUrl && settings.sharedStore && settings.masterKey && role?.kind !== "worker"
    ? forwardKey(settings.masterKey)
    : null;
}
