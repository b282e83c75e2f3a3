/**
 * Where a WebSocket of a cluster host opens (issue 47), by the same route as a call (`_cluster_executor.ts`):
 * a replica of the app on this host; else a ready replica on another host (the power of two choices over
 * its free slots, else the least busy host holding one), opened over the internal endpoint with the hop's
 * signed credential; else a new replica here while a seat is free and the host has room; else another host
 * that could place one. A host that refuses (503: it lost its seat, it is draining, it cannot be reached)
 * is skipped and the view read again. The landing host keeps the run's record, as for a forwarded call.
 */
import type { ClusterRegistry } from "../cluster/mod.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { type AppWebSocket, NoSeatError, RunFailure, type Runtime, type WebSocketRequest } from "../runtime/mod.ts";
import { heldHere, leastBusyHost, placeHere, placementHost, twoChoices } from "./_cluster_executor.ts";

/** Attempts at opening one connection on another host before it gives up with the last host's answer. */
const FORWARD_ATTEMPTS = 4;

/** Options of `clusterWebSockets`. */
export interface ClusterWebSocketsOptions {
  runtime: Runtime;
  registry: ClusterRegistry;
  /** Opens a connection on another host (`forwardWebSocket` with this cluster's key). */
  forward(hostUrl: string, request: WebSocketRequest): Promise<AppWebSocket>;
  logger: Logger;
  /** Picks among candidates; default `Math.random`. */
  random?(): number;
}

/** A cluster host's two ways to open a WebSocket. */
export interface ClusterWebSockets {
  /** A caller's connection landing here: here, or on another host (see the module's comment). */
  connect(request: WebSocketRequest): Promise<AppWebSocket>;
  /** A connection another host forwarded: on a replica here, or one placed here; never forwarded again. */
  placing(request: WebSocketRequest): Promise<AppWebSocket>;
}

/** Makes a cluster host's WebSocket placement over its runtime and the cluster's view. */
export function clusterWebSockets(options: ClusterWebSocketsOptions): ClusterWebSockets {
  const { runtime, registry, logger } = options;
  const random = options.random ?? Math.random;

  /** Where the connection goes now: here (null host), another host, or nowhere yet (undefined). */
  async function route(
    request: WebSocketRequest,
    tried: ReadonlySet<string>,
  ): Promise<{ hostId: string; url: string } | null | undefined> {
    const target = { projectId: request.projectId, app: request.app };
    if (heldHere(runtime, target) > 0) return null;
    const remote = registry.view().seats.filter((seat) =>
      seat.projectId === request.projectId && seat.appId === request.app && seat.hostId !== registry.hostId
      && !tried.has(seat.hostId)
    );
    const chosen = twoChoices(remote.filter((s) => s.state === "ready" && s.busy < s.slots), random)
      ?? leastBusyHost(remote);
    if (chosen) return chosen;
    if (await placeHere(runtime, registry, target)) return null;
    return placementHost(registry.view(), {
      ...target,
      selfId: registry.hostId,
      tried,
      maxReplicas: runtime.appSettings(request.projectId, request.app).maxReplicas,
      hardware: runtime.apps(request.projectId).find((a) => a.name === request.app)?.config?.hardware,
    });
  }

  async function connect(request: WebSocketRequest): Promise<AppWebSocket> {
    const settings = await runtime.findApp(request.projectId, request.app);
    // A Python app has no WebSockets: the runtime answers why, without placing anything.
    if (settings.runtime !== "custom") return await runtime.connectWebSocket(request);
    let refused: unknown;
    const tried = new Set<string>();
    for (let attempt = 0; attempt < FORWARD_ATTEMPTS; attempt++) {
      if (request.signal?.aborted) break;
      const target = await route(request, tried);
      if (target === null) return await runtime.connectWebSocket(request);
      if (target === undefined) {
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
          "a host refused a WebSocket; trying another",
        );
        refused = error;
        tried.add(target.hostId);
        await registry.refresh();
      }
    }
    if (request.signal?.aborted) {
      throw new RunFailure("interrupted", "The caller went away while the WebSocket looked for a replica", {
        runId: request.runId,
      });
    }
    throw refused ?? new ProblemError(
      "service-unavailable",
      `No host could take a WebSocket of ${request.projectId}/${request.app} now; retry`,
      { headers: { "Retry-After": "1" } },
    );
  }

  return {
    connect,
    async placing(request) {
      await runtime.findApp(request.projectId, request.app);
      const target = { projectId: request.projectId, app: request.app };
      if (heldHere(runtime, target) === 0 && !(await placeHere(runtime, registry, target))) {
        throw new NoSeatError(`${request.projectId}/${request.app}`);
      }
      return await runtime.connectWebSocket(request);
    },
  };
}
