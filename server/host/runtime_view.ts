/**
 * What a worker shows of the supervisor's replicas. A worker's own runtime knows the apps but runs no
 * replica, so an app's replicas, its calls in flight, the host's capacity in use and the GPUs held are
 * the supervisor's: it sends a snapshot of them to every worker when they change (looked at every
 * `SNAPSHOT_MS`), and a worker answers those reads from the newest one it has.
 */
import type { ClusterView } from "../cluster/mod.ts";
import type { Capacity, ReplicaGpus, ReplicaStates, Runtime } from "../runtime/mod.ts";

/** How often the supervisor looks for a change to send. */
export const SNAPSHOT_MS = 250;

/** The supervisor's replicas as its workers see them (JSON, over the IPC channel). */
export interface RuntimeSnapshot {
  runplane: "runtime-snapshot";
  /** Per app (`project/app`): its replicas, their GPUs and its calls. */
  apps: Record<string, { replicas: ReplicaStates; gpus: ReplicaGpus[]; capacity: Capacity | null }>;
  host: ReturnType<Runtime["hostCapacity"]>;
  replicaStates: ReturnType<Runtime["replicaStates"]>;
  waiting: ReturnType<Runtime["waitingForCapacity"]>;
  /** On a host of a cluster: the supervisor's cached view of the cluster's hosts and seats. */
  cluster: ClusterView | null;
}

export function isRuntimeSnapshot(message: unknown): message is RuntimeSnapshot {
  return (message as RuntimeSnapshot | null)?.runplane === "runtime-snapshot";
}

/** The snapshot of `runtime` (and of the cluster's view, on a host of a cluster) now. */
export function runtimeSnapshot(runtime: Runtime, clusterView?: () => ClusterView): RuntimeSnapshot {
  const apps: RuntimeSnapshot["apps"] = {};
  for (const info of runtime.apps()) {
    let capacity: Capacity | null = null;
    try {
      capacity = runtime.capacity(info.projectId, info.name);
    } catch {
      // An app that does not load has no capacity; its replicas (of older versions) still count.
    }
    apps[`${info.projectId}/${info.name}`] = { replicas: info.replicas, gpus: info.gpus, capacity };
  }
  return {
    runplane: "runtime-snapshot",
    apps,
    host: runtime.hostCapacity(),
    replicaStates: runtime.replicaStates(),
    waiting: runtime.waitingForCapacity(),
    cluster: clusterView?.() ?? null,
  };
}

/**
 * Calls `send` with a snapshot of `runtime` whenever it changed, looking every `SNAPSHOT_MS`, and at once
 * for `resend()` (a new worker). Returns what stops it.
 */
export function sendSnapshots(
  runtime: Runtime,
  send: (snapshot: RuntimeSnapshot) => void,
  options: { clusterView?: () => ClusterView } = {},
): { resend(): void; stop(): void } {
  let last = "";
  function look(force: boolean): void {
    const snapshot = runtimeSnapshot(runtime, options.clusterView);
    const text = JSON.stringify(snapshot);
    if (!force && text === last) return;
    last = text;
    send(snapshot);
  }
  const timer = setInterval(() => look(false), SNAPSHOT_MS);
  timer.unref();
  return { resend: () => look(true), stop: () => clearInterval(timer) };
}

const NO_REPLICAS: ReplicaStates = { starting: 0, idle: 0, busy: 0 };

/**
 * `local` (a worker's runtime), with what it reads of replicas, calls in flight and host capacity taken
 * from `snapshot()` (the newest the supervisor sent; `local`'s own, all empty, before the first).
 */
export function viewedRuntime(local: Runtime, snapshot: () => RuntimeSnapshot | undefined): Runtime {
  return {
    ...local,
    apps(projectId) {
      const seen = snapshot();
      return local.apps(projectId).map((info) => {
        const there = seen?.apps[`${info.projectId}/${info.name}`];
        return { ...info, replicas: there?.replicas ?? NO_REPLICAS, gpus: there?.gpus ?? [] };
      });
    },
    capacity(projectId, app) {
      const local_ = local.capacity(projectId, app);
      return snapshot()?.apps[`${projectId}/${app}`]?.capacity ?? local_;
    },
    hostCapacity: () => snapshot()?.host ?? local.hostCapacity(),
    replicaStates: () => snapshot()?.replicaStates ?? local.replicaStates(),
    waitingForCapacity: () => snapshot()?.waiting ?? local.waitingForCapacity(),
  };
}
