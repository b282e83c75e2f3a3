/**
 * Placing one WebSocket connection on a replica of its app (`Runtime.connectWebSocket`, issue 47): the
 * same slot a custom runtime's HTTP call takes (leased, or waited for in the app's queue), held while the
 * connection is open, then the upgrade through the replica's relay.
 */
import { ProblemError } from "../problems/mod.ts";
import { label } from "./_app_pool.ts";
import { NoSeatError } from "./_call_placement.ts";
import { CustomProcessReplica } from "./_custom_replica.ts";
import { RunFailure } from "./_failures.ts";
import type { LiveApps } from "./_live_apps.ts";
import type { AppWebSocket, WebSocketRequest } from "./_types.ts";

/** How long an app may take to answer the WebSocket handshake once its replica is ready. */
const HANDSHAKE_TIMEOUT_MS = 30_000;

/** The refusal of a WebSocket to an app that cannot take one: a Python app, or an external url. */
function noWebSockets(what: string): ProblemError {
  return new ProblemError(
    "bad-request",
    `${what}; WebSockets reach a custom runtime started from its [runtime.custom] entrypoint`,
  );
}

/**
 * Opens `request` on a replica of its app in `apps` (see `Runtime.connectWebSocket`). Rejects with a
 * `ProblemError` when the app cannot take it (400 Python or external url, 404, 429 full queue, 503) and
 * with a `RunFailure` when the app's server refused or broke the handshake.
 */
export async function connectAppWebSocket(apps: LiveApps, request: WebSocketRequest): Promise<AppWebSocket> {
  const app = await apps.liveOrLoad(request.projectId, request.app);
  const { config } = app.version;
  const name = label(app.version);
  if (config.runtime !== "custom") throw noWebSockets(`${name} is a Python app, which has no WebSockets`);
  if (config.custom?.kind !== "process") throw noWebSockets(`${name} is an external url`);
  if (apps.options.seated && app.pool.limits.maxReplicas === 0) throw new NoSeatError(name);
  let lease;
  try {
    lease = await app.pool.acquire(request.signal);
  } catch (error) {
    if (request.signal?.aborted) {
      throw new RunFailure("interrupted", "The caller went away while the connection waited for a slot", {
        runId: request.runId,
      });
    }
    throw error;
  }
  try {
    await lease.replica.ready;
    const replica = lease.replica;
    if (!(replica instanceof CustomProcessReplica)) throw noWebSockets(`${name} has no server of its own`);
    if (app.version.deploymentId !== undefined) request.onDeployment?.(app.version.deploymentId);
    const path = request.query ? `${request.path}?${request.query}` : request.path;
    const socket = await replica.openWebSocket(path, {
      runId: request.runId,
      protocols: request.protocols,
      headers: request.headers,
      maxPayload: request.maxPayload,
      handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
    });
    return {
      socket,
      graceMs: config.responseGracePeriodMs,
      replicaGone: replica.exited,
      oomLimit: () => replica.oomLimit(),
      release: () => lease.release(),
    };
  } catch (error) {
    lease.release();
    if (error instanceof ProblemError && !(error instanceof RunFailure)) {
      throw new ProblemError(error.kind, error.message, { runId: request.runId, headers: error.options.headers });
    }
    throw error;
  }
}
