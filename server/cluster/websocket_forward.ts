/**
 * A WebSocket opened on another host of the cluster (issue 47): the landing host, which authenticated the
 * caller and keeps the run's record, opens a `ws` client to the other host's internal endpoint
 * (`/internal/v1/websockets/{project}/{app}/{path}`), signed with the same hop credential as a forwarded
 * call (kind `websocket`); that host opens one of its replicas and joins the two, frame by frame. To the
 * landing host the connection is an app's WebSocket like a local one: its bridge passes frames, pings and
 * close codes on, and a 1001 (the other host drained) or 1011 (its replica died) reaches the caller.
 */
import WebSocket from "ws";
import { PROBLEM_BASE, PROBLEM_KINDS, ProblemError, type ProblemKind } from "../problems/mod.ts";
import { type AppWebSocket, RunFailure, type WebSocketRequest } from "../runtime/mod.ts";
import { type ForwardKey, signForward } from "./_forward_credential.ts";

/** The path of the internal WebSocket endpoint, below a host's advertised URL. */
export const FORWARD_WEBSOCKET_PATH = "/internal/v1/websockets";
/** The caller's passed headers, as base64url JSON (an object of strings). */
export const FORWARD_WEBSOCKET_HEADERS = "x-runplane-websocket-headers";
/** The app's `response_grace_period` in ms, answered by the other host with its 101. */
export const FORWARD_GRACE_HEADER = "x-runplane-grace-ms";
/** The deployment whose replica took the connection, answered with the 101 (absent for the apps folder's). */
export const FORWARD_DEPLOYMENT_HEADER = "x-runplane-deployment";

/** How long the other host may take to answer the handshake (it may wait for a slot, or start a replica). */
const HANDSHAKE_TIMEOUT_MS = 60_000;

/** Options of `forwardWebSocket`. */
export interface ForwardWebSocketOptions {
  /** Signs the hop's credential. */
  key: ForwardKey;
  /** The clock the credential's time is read from (the store's); default `Date.now`. */
  now?(): number;
}

/** The caller's passed headers as `FORWARD_WEBSOCKET_HEADERS` carries them. */
export function encodeWebSocketHeaders(headers: Record<string, string>): string {
  return Buffer.from(JSON.stringify(headers)).toString("base64url");
}

/** The passed headers of `FORWARD_WEBSOCKET_HEADERS`; null when it is not an object of strings. */
export function decodeWebSocketHeaders(text: string | undefined): Record<string, string> | null {
  if (text === undefined || text === "") return {};
  try {
    const value = JSON.parse(Buffer.from(text, "base64url").toString("utf8")) as unknown;
    if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
    const entries = Object.entries(value as Record<string, unknown>);
    return entries.every(([, v]) => typeof v === "string")
      ? Object.fromEntries(entries) as Record<string, string>
      : null;
  } catch {
    return null;
  }
}

/**
 * The other host's refusal of the upgrade: its problem when it is about the app (400, 404, 429, 5xx with
 * `Retry-After`); a bad credential or an unknown endpoint says that host takes no forwarded WebSockets, a
 * 503 the caller may try elsewhere.
 */
function refusalOf(hostUrl: string, status: number, text: string, retryAfter: unknown): ProblemError {
  let document: { type?: unknown; detail?: unknown } = {};
  try {
    document = JSON.parse(text) as typeof document;
  } catch {
    // Not a problem document: described by its status alone.
  }
  const type = typeof document.type === "string" ? document.type : "";
  const kind = type.slice(PROBLEM_BASE.length);
  const detail = typeof document.detail === "string" ? document.detail : `status ${status}`;
  if (type.startsWith(PROBLEM_BASE) && kind in PROBLEM_KINDS && status !== 401 && status !== 403) {
    const headers = typeof retryAfter === "string" ? { "Retry-After": retryAfter } : undefined;
    return new ProblemError(kind as ProblemKind, detail, { headers });
  }
  return new ProblemError(
    "service-unavailable",
    `The host at ${hostUrl} refused the forwarded WebSocket (${status}: ${detail}); try another host`,
    { headers: { "Retry-After": "1" } },
  );
}

/** The internal endpoint's URL for `request` on the host at `hostUrl` (ws: or wss:). */
function endpointOf(hostUrl: string, request: WebSocketRequest): string {
  const base = new URL(hostUrl);
  base.protocol = base.protocol === "https:" ? "wss:" : "ws:";
  const prefix = base.pathname.replace(/\/$/, "");
  const query = request.query ? `?${request.query}` : "";
  return `${base.origin.replace(/^http/, "ws")}${prefix}${FORWARD_WEBSOCKET_PATH}/${
    encodeURIComponent(request.projectId)
  }/${encodeURIComponent(request.app)}/${request.path}${query}`;
}

/**
 * Opens `request` on a replica of the host at `hostUrl` and resolves once that host and the app accepted
 * the upgrade, paused (the bridge resumes it), as `Runtime.connectWebSocket` does. Rejects with that
 * host's problem (404, 429, 503 with `Retry-After`: try another host), a 503 when it could not be reached
 * or refused the hop, and `interrupted` when `request.signal` aborted first.
 */
export function forwardWebSocket(
  hostUrl: string,
  request: WebSocketRequest,
  options: ForwardWebSocketOptions,
): Promise<AppWebSocket> {
  const { runId } = request;
  const credential = signForward(options.key, {
    runId,
    projectId: request.projectId,
    appId: request.app,
    functionName: request.path,
    at: Math.round((options.now ?? Date.now)()),
    kind: "websocket",
  });
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(endpointOf(hostUrl, request), request.protocols, {
      perMessageDeflate: false,
      followRedirects: false,
      autoPong: false,
      maxPayload: request.maxPayload,
      handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
      headers: {
        "x-runplane-forwarded": credential,
        "x-request-id": runId,
        [FORWARD_WEBSOCKET_HEADERS]: encodeWebSocketHeaders(request.headers),
      },
    });
    let graceMs = 0;
    const onAbort = () => fail(new Error("aborted"));
    const fail = (error: unknown) => {
      request.signal?.removeEventListener("abort", onAbort);
      socket.removeAllListeners();
      socket.on("error", () => undefined);
      socket.terminate();
      if (request.signal?.aborted) {
        reject(new RunFailure("interrupted", "The caller went away before the WebSocket opened", { runId }));
      } else if (error instanceof ProblemError) reject(error);
      else {
        reject(
          new ProblemError(
            "service-unavailable",
            `The host at ${hostUrl} could not be reached to open the WebSocket (${
              (error as Error).message
            }); try another host`,
            { headers: { "Retry-After": "1" } },
          ),
        );
      }
    };
    if (request.signal?.aborted) return fail(new Error("aborted"));
    request.signal?.addEventListener("abort", onAbort, { once: true });
    socket.once("unexpected-response", (_request, response) => {
      const chunks: Buffer[] = [];
      let size = 0;
      response.on("data", (chunk: Buffer) => {
        if ((size += chunk.length) <= 64 * 1024) chunks.push(chunk);
      });
      response.on("error", () => undefined);
      response.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        fail(refusalOf(hostUrl, response.statusCode ?? 0, text, response.headers["retry-after"]));
      });
    });
    socket.once("upgrade", (response) => {
      graceMs = Number(response.headers[FORWARD_GRACE_HEADER]) || 0;
      const deployment = response.headers[FORWARD_DEPLOYMENT_HEADER];
      if (typeof deployment === "string" && deployment) request.onDeployment?.(deployment);
    });
    socket.once("error", fail);
    socket.once("open", () => {
      request.signal?.removeEventListener("abort", onAbort);
      socket.removeAllListeners();
      // What the other host sends at once waits until the bridge's reader is attached.
      socket.pause();
      resolve({
        socket,
        // The other host closes the connection at the app's grace period itself (1001); this one agrees.
        graceMs: graceMs > 0 ? graceMs : 3_600_000,
        // The other host's replica dying reaches this host as its 1011 close.
        replicaGone: new Promise<void>(() => {}),
        oomLimit: () => undefined,
        release: () => undefined,
        remote: true,
      });
    });
  });
}
