/**
 * The runs module's executor when the processes on one PostgreSQL are one cluster (issue 31,
 * `RUNPLANE_ADVERTISE_URL`): an app's replicas are counted across every host by seats held in the store,
 * and a call goes to warm capacity wherever it is. Like `runtime_executor.ts`, it lives in the placement
 * layer under the composition root, which knows the runtime, the cluster registry and the forwarding hop
 * together; `cluster_host.ts` makes it (`placeExecutors` in `mod.ts` says where it serves).
 *
 * Where a call goes, in order:
 * 1. a free slot of a replica on this host;
 * 2. a free slot of a ready replica on another host, chosen by the power of two choices over the calls in
 *    flight that the cached view says it has (the view is kept fresh by NOTIFY; never a query per call);
 * 3. a new replica on the least loaded host (fewest seats of every app) whose capacity fits one, while a
 *    seat of the app is free in the store: here on a tie, or when this host has room and no other holds
 *    fewer seats; else another host, which places it;
 * 4. the queue of this host when it holds replicas of the app;
 * 5. while a seat is free: another host whose capacity fits a replica (GPUs included), holding the fewest
 *    seats, which places one there;
 * 6. the queue of the least busy host holding the app's replicas (429 past it).
 * A host that refuses a forwarded call (503: it lost its seat, or is stopping) is skipped and the view read
 * again. A forwarded call runs on the receiving host's `placing` executor: there, or on a replica it
 * places there, and never forwarded again.
 */
import type { ClusterRegistry, ClusterView, LiveSeat } from "../cluster/mod.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { runtimeExecutor } from "./runtime_executor.ts";
import type { ExecutedCall, ExecuteRequest, RunExecutor } from "../runs/mod.ts";
import { type AppConfig, NoSeatError, RunFailure, type Runtime } from "../runtime/mod.ts";

/** Options of `clusterExecutor`. */
export interface ClusterExecutorOptions {
  runtime: Runtime;
  registry: ClusterRegistry;
  /** Sends a call to another host (`forwardCall` with this cluster's key). */
  forward(hostUrl: string, request: ExecuteRequest): Promise<ExecutedCall>;
  logger: Logger;
  /** Picks among candidates (tests pass a fixed one); default `Math.random`. */
  random?(): number;
}

/** The executors of a cluster host, and the upkeep that keeps its seats true. */
export interface ClusterExecutor extends RunExecutor {
  /** Runs a call forwarded by another host: on a replica here, or one placed here; never forwarded again. */
  placing: RunExecutor;
  /** Claims warm seats until every app's `min_replicas` are held somewhere (where this host has room). */
  keepWarm(): Promise<void>;
  /** Releases the seats no replica here needs any more (cooldown, an app gone). */
  releaseSpare(): Promise<void>;
}

/** Attempts at forwarding one call before it gives up with the last host's answer. */
const FORWARD_ATTEMPTS = 4;

/** Creates the cluster's executor over the runtime (see the module's comment). */
export function clusterExecutor(options: ClusterExecutorOptions): ClusterExecutor {
  const { runtime, registry, logger } = options;
  const local = runtimeExecutor(runtime);
  const random = options.random ?? Math.random;

  /** The app's seats on other hosts, optionally only ready ones with a free slot. */
  function remoteSeats(request: ExecuteRequest, free: boolean): LiveSeat[] {
    return registry.view().seats.filter((seat) =>
      seat.projectId === request.projectId && seat.appId === request.app && seat.hostId !== registry.hostId
      && (!free || (seat.state === "ready" && seat.busy < seat.slots))
    );
  }

  /** Where the call goes now: a local run, a host to forward to, or nowhere yet (read the view again). */
  async function route(
    request: ExecuteRequest,
    tried: ReadonlySet<string>,
  ): Promise<ExecutedCall | { hostId: string; url: string } | null> {
    const lease = runtime.tryAcquireSlot(request.projectId, request.app);
    if (lease) return await runtime.invoke({ ...request, lease });
    const free = twoChoices(remoteSeats(request, true), random);
    if (free) return free;
    const view = registry.view();
    const placement: PlacementRequest = {
      ...request,
      selfId: registry.hostId,
      tried,
      maxReplicas: runtime.appSettings(request.projectId, request.app).maxReplicas,
      hardware: runtime.apps(request.projectId).find((a) => a.name === request.app)?.config?.hardware,
    };
    // A new replica goes to the least loaded host: here on a tie (no hop), elsewhere when one holds fewer seats.
    const lighter = placementHost(view, { ...placement, fewerSeatsThan: seatsOf(view, registry.hostId) });
    if (lighter) return lighter;
    if (await placeHere(runtime, registry, request)) return await runtime.invoke(request);
    if (heldHere(runtime, request) > 0) return await runtime.invoke(request);
    return placementHost(view, placement) ?? leastBusyHost(remoteSeats(request, false)) ?? null;
  }

  async function execute(request: ExecuteRequest): Promise<ExecutedCall> {
    await runtime.findApp(request.projectId, request.app);
    let refused: unknown;
    const tried = new Set<string>();
    for (let attempt = 0; attempt < FORWARD_ATTEMPTS; attempt++) {
      if (request.signal.aborted) break;
      const target = await route(request, tried);
      if (target !== null && !("hostId" in target)) return target;
      if (target === null) {
        // No seat is visible, yet none could be claimed: the view is behind the store.
        await registry.refresh();
        continue;
      }
      try {
        return await options.forward(target.url, request);
      } catch (error) {
        if (!(error instanceof ProblemError) || error.status !== 503) throw error;
        logger.info(
          { app: `${request.projectId}/${request.app}`, host: target.hostId },
          "a host refused a call; trying another",
        );
        refused = error;
        tried.add(target.hostId);
        await registry.refresh();
      }
    }
    if (request.signal.aborted) {
      throw new RunFailure("interrupted", "The run was interrupted while it looked for a replica", {
        runId: request.runId,
      });
    }
    throw refused
      ?? new ProblemError(
        "service-unavailable",
        `No host could take a call of ${request.projectId}/${request.app} now; retry`,
        {
          headers: { "Retry-After": "1" },
        },
      );
  }

  return {
    execute,
    gracePeriodMs: local.gracePeriodMs,
    freeSlots(target) {
      // Async runs are taken off the queue only where a replica may run them: free slots here, or a
      // replica this host could place (a free seat, room on the host).
      const here = local.freeSlots(target) as number;
      if (here > 0 && heldHere(runtime, target) > 0) return here;
      try {
        const { maxReplicas, replicaConcurrency } = runtime.appSettings(target.projectId, target.app);
        const held = registry.view().seats.filter((s) => s.projectId === target.projectId && s.appId === target.app);
        if (held.length < maxReplicas && runtime.canPlace(target.projectId, target.app)) return replicaConcurrency;
        return 0;
      } catch {
        // A missing or broken app: its runs are taken and fail with why.
        return 1;
      }
    },
    placing: placingExecutor(runtime, registry),
    keepWarm: () => claimWarmSeats(runtime, registry),
    async releaseSpare() {
      const spare = runtime.spareSeats();
      for (const ref of spare) await registry.releaseSeat(ref);
      if (spare.length > 0) registry.changed();
    },
  };
}

/** Of two candidates drawn at random, the one with fewer calls in flight (the power of two choices). */
export function twoChoices(seats: LiveSeat[], random: () => number): LiveSeat | undefined {
  if (seats.length <= 1) return seats[0];
  const a = seats[Math.floor(random() * seats.length)];
  const b = seats[Math.floor(random() * seats.length)];
  return a.busy <= b.busy ? a : b;
}

/** The least busy host of `seats` (its seats' free slots summed), for a call that queues there. */
export function leastBusyHost(seats: LiveSeat[]): LiveSeat | undefined {
  const load = new Map<string, number>();
  for (const seat of seats) load.set(seat.hostId, (load.get(seat.hostId) ?? 0) + seat.busy - seat.slots);
  return [...seats].sort((a, b) => load.get(a.hostId)! - load.get(b.hostId)!)[0];
}

/** What `placementHost` weighs: the app, this host, the hosts that refused the call already. */
export interface PlacementRequest {
  projectId: string;
  app: string;
  selfId: string;
  tried: ReadonlySet<string>;
  maxReplicas: number;
  hardware?: AppConfig["hardware"];
  /** Only hosts holding fewer seats (of every app) than this. */
  fewerSeatsThan?: number;
}

/** The seats (of every app) `hostId` holds in `view`. */
function seatsOf(view: ClusterView, hostId: string): number {
  return view.seats.filter((s) => s.hostId === hostId).length;
}

/**
 * Another host that could place a replica of the app while a seat is free: one whose whole capacity
 * fits a replica (GPUs included), holding the fewest seats of any app (and fewer than `fewerSeatsThan`). Its own budget decides when the
 * call arrives (a 503 sends the call on to the next).
 */
export function placementHost(
  view: ClusterView,
  request: PlacementRequest,
): { hostId: string; url: string } | undefined {
  const held = view.seats.filter((s) => s.projectId === request.projectId && s.appId === request.app).length;
  if (held >= request.maxReplicas) return undefined;
  const { hardware, fewerSeatsThan = Infinity } = request;
  return view.hosts
    .filter((host) =>
      host.hostId !== request.selfId && !request.tried.has(host.hostId)
      && seatsOf(view, host.hostId) < fewerSeatsThan
      && (!hardware || (host.capacity.cpu >= hardware.cpu && host.capacity.memoryBytes >= hardware.memoryBytes
        && host.capacity.gpus >= hardware.gpuCount))
    )
    .sort((a, b) => seatsOf(view, a.hostId) - seatsOf(view, b.hostId))[0];
}

/** Claims warm seats (below `min_replicas`) until every app has its warm ones somewhere, where this host has room. */
async function claimWarmSeats(runtime: Runtime, registry: ClusterRegistry): Promise<void> {
  for (const app of runtime.apps()) {
    const min = app.config?.minReplicas ?? 0;
    if (min === 0 || app.error !== undefined) continue;
    const warm = () =>
      registry.view().seats.filter((s) => s.projectId === app.projectId && s.appId === app.name && s.seat < min)
        .length;
    while (warm() < min && runtime.canPlace(app.projectId, app.name)) {
      const seat = await registry.claimSeat({
        projectId: app.projectId,
        appId: app.name,
        limit: min,
        slots: runtime.appSettings(app.projectId, app.name).replicaConcurrency,
      });
      if (seat === null) break;
      runtime.addSeat({ projectId: app.projectId, appId: app.name, seat });
      await registry.refresh();
    }
  }
}

/** Which app a call is of. */
interface AppOf {
  projectId: string;
  app: string;
}

/** The seats of the app this host holds. */
export function heldHere(runtime: Runtime, target: AppOf): number {
  return runtime.heldSeats().filter((s) => s.projectId === target.projectId && s.appId === target.app).length;
}

/** A new replica of the app here: claims a seat when the host has room; false when it cannot. */
export async function placeHere(runtime: Runtime, registry: ClusterRegistry, target: AppOf): Promise<boolean> {
  const { projectId, app: appId } = target;
  if (!runtime.canPlace(projectId, appId)) return false;
  const { maxReplicas, replicaConcurrency } = runtime.appSettings(projectId, appId);
  const seat = await registry.claimSeat({ projectId, appId, limit: maxReplicas, slots: replicaConcurrency });
  if (seat === null) return false;
  if (!runtime.addSeat({ projectId, appId, seat })) {
    await registry.releaseSeat({ projectId, appId, seat });
    return false;
  }
  registry.changed();
  return true;
}

/** Runs a call forwarded by another host: on a replica here, or one placed here; never forwarded again. */
function placingExecutor(runtime: Runtime, registry: ClusterRegistry): RunExecutor {
  const local = runtimeExecutor(runtime);
  return {
    gracePeriodMs: local.gracePeriodMs,
    freeSlots: local.freeSlots,
    async execute(request) {
      await runtime.findApp(request.projectId, request.app);
      const lease = runtime.tryAcquireSlot(request.projectId, request.app);
      if (lease) return await runtime.invoke({ ...request, lease });
      if (heldHere(runtime, request) > 0 || (await placeHere(runtime, registry, request))) {
        return await runtime.invoke(request);
      }
      throw new NoSeatError(`${request.projectId}/${request.app}`);
    },
  };
}
