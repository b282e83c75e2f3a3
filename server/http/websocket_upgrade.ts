/**
 * WebSocket runs (issue 47): a `GET` with `Upgrade: websocket` on `/v4/{project}/{app}/{path}`, taken on
 * the Node server's `upgrade` event (outside Koa, which answers requests, not sockets). It is
 * authenticated like a run call — the bearer header with the `run` scope, or a single-use ticket of this
 * app (`?ticket=`, from `createWebSocketTicket`) for a browser, which cannot send the header; a token is
 * never taken from a URL — then it becomes a run (`mode: "websocket"`), holds a slot of the app's replica,
 * and is joined to the app's own WebSocket (`WebSocketBridge`). Every refusal is an HTTP problem answered
 * before the upgrade.
 *
 * Origin is not checked: a WebSocket is never authenticated by a cookie here (the dashboard's session is
 * not accepted), so a page of another site can open one only with a ticket its own server minted with a
 * token, which is the credential.
 */
import { type IncomingMessage, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer } from "ws";
import { type RouteSpec, routes } from "../../generated/routes.ts";
import type { TokenVerifier, WebSocketTickets } from "../auth/mod.ts";
import type { Logger } from "../log.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import type { LiveRun, RunService } from "../runs/mod.ts";
import type { AppWebSocket, Runtime, WebSocketRequest } from "../runtime/mod.ts";
import { authenticate } from "./authenticate.ts";
import type { DrainGate } from "./drain_gate.ts";
import { newRequestId } from "./_request_state.ts";
import { type BridgedRun, WebSocketBridge } from "./websocket_bridge.ts";
import { forwardedTarget, type ForwardedWebSocketOptions, isForwardedWebSocket } from "./websocket_forwarded.ts";
import { FORWARD_DEPLOYMENT_HEADER, FORWARD_GRACE_HEADER } from "../cluster/mod.ts";

const RUN_ROUTE = routes.find((route) => route.operationId === "runFunction") as RouteSpec;
const PATH = /^\/v4\/([a-z0-9][a-z0-9-]{0,62})\/([A-Za-z0-9][A-Za-z0-9_-]{0,62})\/([^?]*)$/;
/** Headers of the caller's that never reach the app: credentials, hop-by-hop, the handshake's own. */
const DROPPED = new Set([
  "authorization",
  "proxy-authorization",
  "cookie",
  "host",
  "connection",
  "keep-alive",
  "upgrade",
  "te",
  "trailer",
  "transfer-encoding",
  "content-length",
  "x-request-id",
  "sec-websocket-key",
  "sec-websocket-version",
  "sec-websocket-extensions",
  "sec-websocket-protocol",
]);
/** How long open connections may take to close when the drain timeout ends. */
const GOING_AWAY_MS = 5_000;

/** Options of `createWebSocketUpgrades`. */
export interface WebSocketUpgradeOptions {
  verifier: TokenVerifier;
  tickets: WebSocketTickets;
  runtime: Runtime;
  runs: RunService;
  gate: DrainGate;
  logger: Logger;
  /** `RUNPLANE_WS_MAX_MESSAGE`, `RUNPLANE_WS_MAX_PER_PROJECT`, `RUNPLANE_WS_PING_INTERVAL`. */
  limits: { maxMessageBytes: number; maxPerProject: number; pingIntervalMs: number };
  /**
   * Writes the run's record before the 101 (a host's supervisor): the caller may read or cancel it at
   * once through any worker, which reads the store, not this process's write-behind buffer.
   */
  recordBeforeOpen?: boolean;
  /**
   * Where a connection opens (a host of a cluster: a replica here, else on another host that holds one,
   * over the internal endpoint); default `runtime.connectWebSocket`.
   */
  connect?(request: WebSocketRequest): Promise<AppWebSocket>;
  /** A host of a cluster: the internal endpoint other hosts open their callers' WebSockets on. */
  forwarded?: ForwardedWebSocketOptions;
}

/** This process's WebSocket runs. */
export interface WebSocketUpgrades {
  /**
   * The `upgrade` listener of the HTTP server (and, on a host's supervisor, of the upgrades its workers
   * hand it); settles once the upgrade is accepted or refused.
   */
  handle(request: IncomingMessage, socket: Duplex, head: Buffer): Promise<void>;
  /** Connections open now. */
  readonly open: number;
  /** Bytes the open connections hold for slow readers now (each bounded; see `HIGH_WATER`). */
  bufferedBytes(): number;
  /** Closes every open connection with 1001 (the drain timeout ended); resolves once their runs ended. */
  goingAway(): Promise<void>;
}

/** Answers `problem` on the raw socket, before any upgrade, and closes it. */
function refuse(socket: Duplex, problem: ProblemError, options: { requestId: string; path: string }): void {
  const body = JSON.stringify(problem.toDocument(options.path));
  const headers: Record<string, string> = {
    ...problem.options.headers,
    "Content-Type": "application/problem+json",
    "Content-Length": String(Buffer.byteLength(body)),
    "X-Request-Id": problem.options.runId ?? options.requestId,
    Connection: "close",
  };
  const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("");
  socket.end(`HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}\r\n${lines}\r\n${body}`);
}

/** Who the caller is: a bearer token with the `run` scope, else a ticket of this app; 401/403 otherwise. */
async function admit(
  request: IncomingMessage,
  options: {
    verifier: TokenVerifier;
    tickets: WebSocketTickets;
    projectId: string;
    appId: string;
    query: URLSearchParams;
  },
): Promise<void> {
  const { query } = options;
  if (query.has("token") || query.has("access_token")) {
    throw new ProblemError(
      "bad-request",
      "A token is never accepted in a URL; send it as `Authorization: Bearer`, or pass a ticket from createWebSocketTicket as ?ticket=",
    );
  }
  const ticket = query.get("ticket");
  if (request.headers.authorization !== undefined || ticket === null) {
    await authenticate(options.verifier, {
      route: RUN_ROUTE,
      authorization: request.headers.authorization,
      projectId: options.projectId,
    });
    return;
  }
  const refusal = await options.tickets.consume(ticket, { projectId: options.projectId, appId: options.appId });
  if (refusal === "other-app") {
    throw new ProblemError(
      "forbidden",
      `This ticket was minted for another app than ${options.projectId}/${options.appId}`,
    );
  }
  if (refusal !== null) {
    throw new ProblemError(
      "unauthorized",
      `This ticket is ${
        refusal === "expired" ? "expired" : "unknown or used"
      }: a ticket opens one connection within 60 s; mint another with createWebSocketTicket`,
      { headers: { "WWW-Authenticate": 'Bearer realm="runplane"' } },
    );
  }
}

/** The caller's headers that reach the app, and the subprotocols it offered. */
function passedHeaders(request: IncomingMessage): { headers: Record<string, string>; protocols: string[] } {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || DROPPED.has(name)) continue;
    headers[name] = Array.isArray(value) ? value.join(", ") : value;
  }
  const offered = request.headers["sec-websocket-protocol"];
  const protocols = offered ? offered.split(",").map((p) => p.trim()).filter(Boolean) : [];
  return { headers, protocols };
}

/** A 400 unless the request is a WebSocket handshake `ws` can accept. */
function checkHandshake(request: IncomingMessage): void {
  const key = request.headers["sec-websocket-key"];
  if (!key || !/^[+/0-9A-Za-z]{22}==$/.test(key) || request.headers["sec-websocket-version"] !== "13") {
    throw new ProblemError(
      "bad-request",
      "A WebSocket handshake needs Sec-WebSocket-Key and Sec-WebSocket-Version: 13",
    );
  }
}

/**
 * The stand-in run of a connection opened here for another host's run: that host records it (counters,
 * close, end); here nothing is written, and the connection ends when that host's socket or the app's
 * closes, or this host drains.
 */
function unrecorded(runId: string): BridgedRun {
  const ended = () => Promise.resolve();
  return {
    runId,
    signal: new AbortController().signal,
    countWebSocket: () => undefined,
    succeed: ended,
    cancelled: ended,
    fail: ended,
  };
}

/** A WebSocket run's target: the app, the path after it, the query, and the run. */
interface Target {
  projectId: string;
  appId: string;
  path: string;
  query: URLSearchParams;
}

/** This process's WebSocket runs (see `WebSocketUpgrades`). */
class WebSocketRuns implements WebSocketUpgrades {
  readonly #options: WebSocketUpgradeOptions;
  readonly #bridges = new Set<WebSocketBridge>();
  readonly #perProject = new Map<string, number>();
  readonly #server: WebSocketServer;
  readonly #answered = new WeakMap<IncomingMessage, string[]>();
  #chosenProtocol: string | false = false;

  constructor(options: WebSocketUpgradeOptions) {
    this.#options = options;
    this.#server = new WebSocketServer({
      noServer: true,
      clientTracking: false,
      perMessageDeflate: false,
      autoPong: false,
      maxPayload: options.limits.maxMessageBytes,
      // The app's choice among the caller's offers: set just before each (synchronous) `handleUpgrade`.
      handleProtocols: () => this.#chosenProtocol,
    });
    this.#server.on("headers", (headers, request) => headers.push(...(this.#answered.get(request) ?? [])));
  }

  readonly handle = (request: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> => {
    socket.on("error", () => undefined);
    const requestId = newRequestId();
    const forwarded = this.#options.forwarded !== undefined && isForwardedWebSocket(request.url ?? "");
    const upgrade = forwarded ? this.#forwardedUpgrade(request, socket, head) : this.#upgrade(request, socket, head);
    return upgrade.catch((error: unknown) => {
      if (socket.destroyed) return;
      const problem = isProblemError(error) ? error : new ProblemError("internal", "The WebSocket could not be opened");
      if (!isProblemError(error)) {
        this.#options.logger.error({ err: error, req_id: requestId }, "WebSocket upgrade failed");
      }
      refuse(socket, problem, { requestId, path: (request.url ?? "").split("?")[0] });
    });
  };

  get open(): number {
    return this.#bridges.size;
  }

  bufferedBytes(): number {
    let total = 0;
    for (const bridge of this.#bridges) total += bridge.bufferedAmount;
    return total;
  }

  async goingAway(): Promise<void> {
    const open = [...this.#bridges];
    if (open.length === 0) return;
    this.#options.logger.warn({ websockets: open.length }, "closing WebSockets with 1001: the server is going away");
    for (const bridge of open) {
      bridge.close(1001, "The server is going away", {
        status: "failure",
        type: "interrupted",
        message: "The server stopped (drained) while the WebSocket was open",
      });
    }
    const deadline = Date.now() + GOING_AWAY_MS;
    while (this.#bridges.size > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  #count(projectId: string, by: number): void {
    const next = (this.#perProject.get(projectId) ?? 0) + by;
    if (next > 0) this.#perProject.set(projectId, next);
    else this.#perProject.delete(projectId);
  }

  /** The request's target once it is admitted (a WebSocket GET, not draining, authenticated, within limits). */
  async #admitted(request: IncomingMessage): Promise<Target> {
    const options = this.#options;
    const url = request.url ?? "/";
    const match = PATH.exec(url.split("?")[0]);
    if (request.method !== "GET" || request.headers.upgrade?.toLowerCase() !== "websocket" || !match) {
      throw new ProblemError("not-found", "WebSockets open at /v4/{project_id}/{app_name}/{path} with GET");
    }
    if (options.gate.draining) {
      throw new ProblemError("service-unavailable", "The server is draining; connect again", {
        headers: { "Retry-After": "1" },
      });
    }
    checkHandshake(request);
    const [, projectId, appId, path] = match;
    const query = new URLSearchParams(url.includes("?") ? url.slice(url.indexOf("?") + 1) : "");
    await admit(request, { verifier: options.verifier, tickets: options.tickets, projectId, appId, query });
    const limit = options.limits.maxPerProject;
    if ((this.#perProject.get(projectId) ?? 0) >= limit) {
      throw new ProblemError(
        "too-many-requests",
        `Project ${projectId} has ${limit} WebSockets open here (RUNPLANE_WS_MAX_PER_PROJECT); close one, or retry later`,
        { headers: { "Retry-After": "1" } },
      );
    }
    query.delete("ticket");
    return { projectId, appId, path, query };
  }

  async #upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const target = await this.#admitted(request);
    this.#count(target.projectId, 1);
    let counted = true;
    try {
      const submission = await this.#options.runs.submit({
        projectId: target.projectId,
        app: target.appId,
        functionName: target.path,
        mode: "websocket",
        input: {},
      });
      if (submission.kind !== "live") throw new Error("A WebSocket run is always live");
      const run = submission.run;
      let app: AppWebSocket;
      try {
        app = await this.#connect(request, socket, { ...target, run });
      } catch (error) {
        await run.fail(error).catch(() => undefined);
        throw error;
      }
      if (this.#options.recordBeforeOpen) await this.#options.runs.flush();
      if (socket.destroyed) {
        app.socket.terminate();
        app.release();
        await run.cancelled().catch(() => undefined);
        return;
      }
      this.#accept({ request, socket, head }, { projectId: target.projectId, run, app });
      counted = false;
    } finally {
      if (counted) this.#count(target.projectId, -1);
    }
  }

  /**
   * An upgrade another host of the cluster forwarded (`websocket_forwarded.ts`): its credential checked,
   * the connection opened on a replica here and joined to that host's socket, unrecorded here (that host
   * keeps the run's record). Its 101 says the app's grace period and the deployment that took it.
   */
  async #forwardedUpgrade(request: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    const forwarded = this.#options.forwarded!;
    const target = forwardedTarget(request, forwarded);
    if (this.#options.gate.draining) {
      throw new ProblemError("service-unavailable", "This host is draining; open the WebSocket on another", {
        headers: { "Retry-After": "1" },
      });
    }
    checkHandshake(request);
    const controller = new AbortController();
    const gone = () => controller.abort(new Error("The forwarding host went away before the WebSocket opened"));
    socket.once("close", gone);
    let deployment: string | undefined;
    let app: AppWebSocket;
    try {
      app = await forwarded.connect({
        projectId: target.projectId,
        app: target.appId,
        path: target.path,
        query: target.query,
        runId: target.runId,
        protocols: target.protocols,
        headers: target.headers,
        maxPayload: this.#options.limits.maxMessageBytes,
        signal: controller.signal,
        onDeployment: (id) => (deployment = id),
      });
    } finally {
      socket.off("close", gone);
    }
    if (socket.destroyed) {
      app.socket.terminate();
      app.release();
      return;
    }
    this.#count(target.projectId, 1);
    this.#accept({ request, socket, head }, {
      projectId: target.projectId,
      run: unrecorded(target.runId),
      app,
      headers: forwardedHeaders(app, deployment),
    });
  }

  /** Opens the app's side; the caller's socket closing meanwhile stops waiting. */
  async #connect(request: IncomingMessage, socket: Duplex, target: Target & { run: LiveRun }): Promise<AppWebSocket> {
    const { run } = target;
    const gone = () => run.abort(new Error("The caller went away before the WebSocket opened"));
    socket.once("close", gone);
    const connect = this.#options.connect ?? ((request) => this.#options.runtime.connectWebSocket(request));
    try {
      return await connect({
        projectId: target.projectId,
        app: target.appId,
        path: target.path,
        query: target.query.toString(),
        runId: run.runId,
        ...passedHeaders(request),
        maxPayload: this.#options.limits.maxMessageBytes,
        signal: run.signal,
        onDeployment: (deploymentId) => run.servedBy(deploymentId),
      });
    } finally {
      socket.off("close", gone);
    }
  }

  /** Completes the caller's upgrade (101, with the app's subprotocol) and joins the two connections. */
  #accept(
    upgrade: { request: IncomingMessage; socket: Duplex; head: Buffer },
    joined: { projectId: string; run: BridgedRun; app: AppWebSocket; headers?: string[] },
  ): void {
    const { run, app, projectId } = joined;
    this.#chosenProtocol = app.socket.protocol || false;
    this.#answered.set(upgrade.request, [`X-Request-Id: ${run.runId}`, ...(joined.headers ?? [])]);
    let accepted = false;
    this.#server.handleUpgrade(upgrade.request, upgrade.socket, upgrade.head, (caller) => {
      accepted = true;
      const bridge = new WebSocketBridge(caller, app, {
        run,
        maxMessageBytes: this.#options.limits.maxMessageBytes,
        pingIntervalMs: this.#options.limits.pingIntervalMs,
        onEnded: () => {
          this.#bridges.delete(bridge);
          this.#count(projectId, -1);
        },
      });
      this.#bridges.add(bridge);
    });
    // `ws` answers a handshake it refuses (a malformed subprotocol list) itself, synchronously, and
    // never calls back: the app's side and the slot are let go, and the run ends.
    if (accepted) return;
    app.socket.terminate();
    app.release();
    this.#count(projectId, -1);
    run.fail({ type: "invalid_arguments", message: "The caller's WebSocket handshake was refused", traceback: null })
      .catch(() => undefined);
  }
}

/** What the 101 of a forwarded WebSocket tells the landing host: the grace period, the deployment. */
function forwardedHeaders(app: AppWebSocket, deployment: string | undefined): string[] {
  const headers = [`${FORWARD_GRACE_HEADER}: ${app.graceMs}`];
  if (deployment !== undefined && /^[\x21-\x7e]+$/.test(deployment)) {
    headers.push(`${FORWARD_DEPLOYMENT_HEADER}: ${deployment}`);
  }
  return headers;
}

/** Makes this process's WebSocket runs: the `upgrade` listener and the drain's way to close them. */
export function createWebSocketUpgrades(options: WebSocketUpgradeOptions): WebSocketUpgrades {
  return new WebSocketRuns(options);
}
