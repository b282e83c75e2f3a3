/** WebSocket runs wired (issue 47): the upgrade listener over the server's parts, and its two gauges. */
import { Gauge } from "prom-client";
import { createTokenVerifier, type SigningKeys } from "../auth/mod.ts";
import type { ServerContext } from "../context.ts";
import type { HostRole } from "../host/mod.ts";
import { createWebSocketUpgrades, type DrainGate, type WebSocketUpgrades } from "../http/mod.ts";

/** What `wireWebSockets` joins besides the server's context. */
export interface WebSocketParts {
  signingKeys: SigningKeys;
  gate: DrainGate;
  role?: HostRole;
}

/** Makes this process's WebSocket runs and registers `runplane_websocket_connections` and `…_buffered_bytes`. */
export function wireWebSockets(context: ServerContext, parts: WebSocketParts): WebSocketUpgrades {
  const { config } = context;
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
    // A host's worker runs no replica: a WebSocket that lands on it is not forwarded (yet), so it says so at once.
    unservedBecause: parts.role?.kind === "worker"
      ? "This server's HTTP workers (RUNPLANE_WORKERS > 1) do not open WebSockets yet; retry, or run it with one process"
      : undefined,
  });
  const registry = context.metrics.registry;
  new Gauge({
    name: "runplane_websocket_connections",
    help: "WebSocket runs open on this process",
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
