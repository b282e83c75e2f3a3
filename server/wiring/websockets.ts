/**
 * WebSocket runs wired (issue 47): the upgrade listener over the server's parts, and its two gauges. On
 * a host with workers, a worker hands each upgrade to its supervisor (`server/host/websocket_handoff.ts`),
 * whose WebSocket runs are the host's: only the supervisor counts them.
 */
import { Gauge } from "prom-client";
import type { Kysely } from "kysely";
import {
  createStoredWebSocketTickets,
  createTokenVerifier,
  createWebSocketTickets,
  type SigningKeys,
  type WebSocketTickets,
} from "../auth/mod.ts";
import type { ServerContext } from "../context.ts";
import type { Database } from "../store/mod.ts";
import type { HostRole } from "../host/mod.ts";
import type { ClusterHost } from "../placement/mod.ts";
import {
  createWebSocketUpgrades,
  type DrainGate,
  type WebSocketUpgradeOptions,
  type WebSocketUpgrades,
} from "../http/mod.ts";

/** What `wireWebSockets` joins besides the server's context. */
export interface WebSocketParts {
  signingKeys: SigningKeys;
  gate: DrainGate;
  role?: HostRole;
  /** This process as a host of a cluster: its WebSockets open on any host's replicas (issue 47). */
  cluster?: ClusterHost;
}

/**
 * This process's WebSocket tickets: on a host of a cluster (`shared`) the cluster's book in the store, so
 * a ticket minted through one host opens a connection through another; else its own book in memory; or
 * (a host's worker) the supervisor's, asked to mint, since the supervisor handles every upgrade and
 * consumes them there. A worker consumes none.
 */
export function webSocketTickets(
  role: HostRole | undefined,
  shared?: { db: Kysely<Database>; now(): number },
): WebSocketTickets {
  if (role?.kind !== "worker") {
    return shared
      ? createStoredWebSocketTickets(shared.db, shared)
      : createWebSocketTickets();
  }
  return { mint: (target) => role.mintTicket(target), consume: () => Promise.resolve("unknown") };
}

/**
 * On a host of a cluster: connections open here or on another host's replica, and other hosts open theirs
 * here, on the internal endpoint.
 */
function clusterParts(cluster: ClusterHost | undefined): Partial<WebSocketUpgradeOptions> {
  if (!cluster) return {};
  return {
    connect: (request) => cluster.webSockets.connect(request),
    forwarded: { ...cluster.hop, connect: (request) => cluster.webSockets.placing(request) },
  };
}

/** Makes this process's WebSocket runs and registers `runplane_websocket_connections` and `…_buffered_bytes`. */
export function wireWebSockets(context: ServerContext, parts: WebSocketParts): WebSocketUpgrades {
  const { config } = context;
  if (parts.role?.kind === "worker") {
    const handOff = parts.role.handOffUpgrade;
    return {
      handle: async (request, socket, head) => await handOff(request, socket, head),
      open: 0,
      bufferedBytes: () => 0,
      // Its WebSockets are the supervisor's, which closes them when the host drains.
      goingAway: () => Promise.resolve(),
    };
  }
  const upgrades = createWebSocketUpgrades({
    verifier: createTokenVerifier({ db: context.store.db, keys: parts.signingKeys }),
    tickets: context.websocketTickets,
    runtime: context.runtime,
    runs: context.runs,
    gate: parts.gate,
    logger: context.logger,
    limits: {
      maxMessageBytes: config.wsMaxMessageBytes,
      maxPerProject: config.wsMaxPerProject,
      pingIntervalMs: config.wsPingIntervalMs,
    },
    // Its workers read the store: the run is there before the caller learns its id.
    recordBeforeOpen: parts.role?.kind === "supervisor",
    ...clusterParts(parts.cluster),
  });
  const registry = context.metrics.registry;
  new Gauge({
    name: "runplane_websocket_connections",
    help: "WebSocket runs open on this process (a host's supervisor: the host's)",
    registers: [registry],
    collect() {
      this.set(upgrades.open);
    },
  });
  new Gauge({
    name: "runplane_websocket_buffered_bytes",
    help: "Bytes this process holds for WebSocket readers slower than their peers (bounded per connection)",
    registers: [registry],
    collect() {
      this.set(upgrades.bufferedBytes());
    },
  });
  return upgrades;
}
