/**
 * The internal end of a WebSocket another host of the cluster opens here (issue 47):
 * `GET /internal/v1/websockets/{project}/{app}/{path}` with `Upgrade: websocket`. Not part of the public
 * contract: only an upgrade carrying a valid `X-Runplane-Forwarded` credential of kind `websocket`, signed
 * by a process with the same master key, for exactly this run, app and path, is opened, on this host's own
 * replicas (never forwarded again). The landing host authenticated the caller and keeps the run's record;
 * this host only joins its replica to the landing host's socket.
 */
import type { IncomingMessage } from "node:http";
import {
  decodeWebSocketHeaders,
  FORWARD_WEBSOCKET_HEADERS,
  FORWARD_WEBSOCKET_PATH,
  type ForwardKey,
  verifyForward,
} from "../cluster/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { AppWebSocket, WebSocketRequest } from "../runtime/mod.ts";

/** What the internal endpoint needs (a host of a cluster). */
export interface ForwardedWebSocketOptions {
  key: ForwardKey;
  /** The clock a credential's time is checked against (the store's). */
  now(): number;
  /** Opens the connection on a replica here, or one placed here; never on another host. */
  connect(request: WebSocketRequest): Promise<AppWebSocket>;
}

/** A forwarded WebSocket's target, once its credential was checked. */
export interface ForwardedTarget {
  projectId: string;
  appId: string;
  /** The path after the app, as the landing host sent it (percent-encoding kept). */
  path: string;
  query: string;
  runId: string;
  headers: Record<string, string>;
  protocols: string[];
}

const INTERNAL_PATH = new RegExp(`^${FORWARD_WEBSOCKET_PATH}/([^/?]+)/([^/?]+)/([^?]*)(?:\\?(.*))?$`);

/** Whether `url` is on the internal WebSocket endpoint (the only upgrades not under `/v4/`). */
export function isForwardedWebSocket(url: string): boolean {
  return url.startsWith(`${FORWARD_WEBSOCKET_PATH}/`);
}

function segment(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new ProblemError("bad-request", "The forwarded WebSocket's path is not valid percent-encoding");
  }
}

/**
 * The target of a forwarded upgrade; a 401 problem unless its credential is valid for this run, app and
 * path (checked before anything else is read), a 400 for a malformed one.
 */
export function forwardedTarget(request: IncomingMessage, options: ForwardedWebSocketOptions): ForwardedTarget {
  const unsigned = new ProblemError(
    "unauthorized",
    "This endpoint takes WebSockets forwarded by another Runplane process with the same master key only",
  );
  const match = INTERNAL_PATH.exec(request.url ?? "");
  const runId = request.headers["x-request-id"];
  const credential = request.headers["x-runplane-forwarded"];
  if (!match || typeof runId !== "string" || !runId || typeof credential !== "string") throw unsigned;
  const [, project, app, path, query = ""] = match;
  const projectId = segment(project);
  const appId = segment(app);
  const fields = { runId, projectId, appId, functionName: path, kind: "websocket" as const };
  if (!verifyForward(options.key, credential, fields, { now: options.now() })) throw unsigned;
  const passed = request.headers[FORWARD_WEBSOCKET_HEADERS];
  const headers = decodeWebSocketHeaders(typeof passed === "string" ? passed : undefined);
  if (headers === null) throw new ProblemError("bad-request", "The forwarded WebSocket's passed headers are malformed");
  const offered = request.headers["sec-websocket-protocol"];
  const protocols = offered ? offered.split(",").map((p) => p.trim()).filter(Boolean) : [];
  return { projectId, appId, path, query, runId, headers, protocols };
}
