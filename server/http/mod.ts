/**
 * The Koa app: request ids, problem documents, auth, body limits and validation, all driven by the
 * generated route table; handlers are plain functions from `server/handlers`.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Stream } from "node:stream";
import Koa, { type Context } from "koa";
import { routes, type RouteSpec } from "../../generated/routes.ts";
import type { SessionRecords, TokenVerifier } from "../auth/mod.ts";
import type { Logger } from "../log.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import { randomBytesPooled } from "../random/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import { authenticate } from "./authenticate.ts";
import { createDashboardSessions, dashboardMiddleware } from "./dashboard.ts";
import type { AnyHandlerResult, HandlerInput, Handlers, LoggedOutcome, OperationId } from "./handler_types.ts";
import { createBodyReader } from "./read_body.ts";
import type { DrainGate } from "./drain_gate.ts";
import { forwardedCalls, type ForwardedCallsOptions } from "./forwarded_calls.ts";
import { decodeRequest } from "./request_decoding.ts";
import { RequestInput } from "./request_input.ts";
import { createOperationRouter } from "./routing.ts";
import { checkResponse } from "./response_check.ts";
import { writeResult, type WrittenJson } from "./response_writer.ts";
import { SpooledBody } from "./spool_body.ts";

export { answerClientErrors, CLIENT_ERROR_STATUSES, MAX_HEADER_BYTES } from "./client_error.ts";
export { createDrainGate, type DrainGate } from "./drain_gate.ts";
export type { ForwardedCallsOptions } from "./forwarded_calls.ts";
export type {
  EventStreamBody,
  Handler,
  HandlerInput,
  HandlerResult,
  Handlers,
  LoggedOutcome,
  OperationId,
} from "./handler_types.ts";
export { checkResponse, type ResponseSnapshot } from "./response_check.ts";
export { SpooledBody } from "./spool_body.ts";
export {
  type FrameOptions,
  formatServerSentEvent,
  frameEvent,
  type HeartbeatOptions,
  type ServerSentEventMessage,
  SSE_PING,
  wantsEventStream,
  withHeartbeat,
} from "./sse.ts";

/** What the HTTP layer needs. */
export interface HttpAppOptions {
  handlers: Handlers;
  verifier: TokenVerifier;
  logger: Logger;
  bodyLimitBytes: number;
  /** The largest body of a media type other than JSON (a deploy bundle). */
  bundleLimitBytes: number;
  /** Where such a body is spooled while its request is handled (removed after, whatever the outcome). */
  spoolDir: string;
  /** Check every response against the contract (development and tests). */
  responseCheck: boolean;
  /** Counts requests in flight and turns new calls away while the server drains. */
  gate?: DrainGate;
  /** Called once per request when its response has been sent (metrics). */
  onRequestFinished?(request: FinishedRequest): void;
  /**
   * The dashboard's sessions: `secrets` seals their cookies, `records` holds them from sign-in to
   * sign-out. Without it there is no dashboard and no cookie is read.
   */
  dashboard?: { secrets: SecretBox; records: SessionRecords };
  /**
   * The store's outage record: an error it recognises as the store being away (logged once per outage)
   * becomes a 503 `store-unavailable` with `Retry-After`, not a logged 500; every 503
   * `store-unavailable` answered, whatever raised it, is counted there (`answered`), in this one place.
   */
  storeOutage?: { refused(error: unknown): boolean; answered(): void };
  /**
   * The internal endpoint other hosts forward calls to (`POST /internal/v1/calls/…`, outside the public
   * contract); absent, it is not mounted.
   */
  forwardedCalls?: Omit<ForwardedCallsOptions, "bodyLimitBytes">;
}

/** The `Retry-After` of a store-unavailable answer, in seconds: about how often an outage is probed. */
const STORE_RETRY_AFTER_S = "2";

/** What is known of a request once its response has been sent. */
export interface FinishedRequest {
  operationId: string | null;
  method: string;
  status: number;
  durationMs: number;
}

interface State {
  requestId: string;
  route?: RouteSpec;
  startedAt: number;
  /** Set by the handler (`logFields`, `logOutcome`): what the request's log line adds. */
  logFields?: Record<string, unknown>;
  logOutcome?: LoggedOutcome;
}

const INPUT = Symbol("runplane.requestInput");
type ResponseWithInput = ServerResponse & { [INPUT]?: RequestInput };

/** One listener for every response (no closure per request): tells the handler's input its client left. */
function onResponseClose(this: ResponseWithInput): void {
  if (!this.writableFinished) this[INPUT]?.disconnect();
}

/** Whether each `%` of `path` starts an escape that decodes (the router finds no operation otherwise). */
function isWellEncoded(path: string): boolean {
  if (!path.includes("%")) return true;
  try {
    decodeURIComponent(path);
    return true;
  } catch {
    return false;
  }
}

/** A new request id: `req_` and 16 random base64url characters. */
export function newRequestId(): string {
  return `req_${randomBytesPooled(12).toString("base64url")}`;
}

/**
 * A declared header's value, or every value when it was sent more than once (Node joins repeats of
 * most headers with ", "). Only a value with a comma pays for the per-header arrays of `headersDistinct`.
 */
function headerValues(req: IncomingMessage, name: string): string | string[] | undefined {
  const value = req.headers[name];
  if (typeof value !== "string" || !value.includes(",")) return value as string | undefined;
  const all = req.headersDistinct[name];
  return all && all.length > 1 ? all : value;
}

function renderProblem(ctx: Context, error: ProblemError, logger: Logger): void {
  ctx.status = error.status;
  for (const [name, value] of Object.entries(error.options.headers ?? {})) ctx.set(name, value);
  ctx.type = "application/problem+json";
  ctx.body = JSON.stringify(error.toDocument(ctx.path));
  // An outage is logged once, with its count, by the store's outage record; not once per request.
  if (error.status >= 500 && error.kind !== "store-unavailable") {
    logger.warn(
      { req_id: (ctx.state as State).requestId, problem: error.kind, detail: error.message },
      "request failed",
    );
  }
}

function asProblem(
  error: unknown,
  options: { logger: Logger; requestId: string; storeOutage?: HttpAppOptions["storeOutage"] },
): ProblemError {
  const { logger, requestId } = options;
  if (isProblemError(error)) return error;
  const status = (error as { status?: number; expose?: boolean }).status;
  if (status === 404) return new ProblemError("not-found", "No such resource");
  if (options.storeOutage?.refused(error)) {
    return new ProblemError(
      "store-unavailable",
      "The store (the server's database) is unavailable, so this request may not have taken effect; retry it after a few seconds (a run with the same Idempotency-Key is never made twice)",
      { headers: { "Retry-After": STORE_RETRY_AFTER_S } },
    );
  }
  logger.error({ req_id: requestId, err: error }, "unhandled error");
  return new ProblemError("internal", `An internal error occurred; quote request id ${requestId} when reporting it`);
}

function snapshot(ctx: Context) {
  const type = ctx.response.type || undefined;
  let body: unknown;
  if (typeof ctx.body === "string" && type?.endsWith("json")) body = JSON.parse(ctx.body);
  else if (typeof ctx.body === "string") body = ctx.body;
  // A streamed JSON body is checked from the value it is being encoded from.
  else if (type?.endsWith("json")) body = (ctx.state as WrittenJson).jsonValue;
  return { status: ctx.status, headers: ctx.response.headers as Record<string, string>, contentType: type, body };
}

/** Creates the Koa app serving every operation of the route table. */
export function createHttpApp(options: HttpAppOptions): Koa {
  const { logger } = options;
  const app = new Koa();
  const readBody = createBodyReader({
    json: options.bodyLimitBytes,
    bytes: options.bundleLimitBytes,
    spoolDir: options.spoolDir,
  });
  const logsRequests = logger.isLevelEnabled("info");
  // Each operation's handler (a function declared below: its requests read the dashboard's sessions).
  const router = createOperationRouter(routes, operationHandler);

  app.use(async (ctx, next) => {
    const state = ctx.state as State;
    state.requestId = newRequestId();
    state.startedAt = performance.now();
    if (options.gate) {
      options.gate.enter();
      ctx.res.on("close", options.gate.leave);
    }
    try {
      if (options.gate?.refuses(ctx.path)) {
        state.route = router.find(ctx.method, ctx.path)?.route;
        throw new ProblemError("service-unavailable", "The server is shutting down; retry the call on another server", {
          headers: { "Retry-After": "5", Connection: "close" },
        });
      }
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        if (!isWellEncoded(ctx.path)) {
          throw new ProblemError("bad-request", "The path is not valid percent-encoding (RFC 3986)");
        }
        const methods = router.allowedMethods(ctx.path);
        if (methods.length) {
          ctx.set("Allow", methods.join(", "));
          throw new ProblemError(
            "method-not-allowed",
            `${ctx.method} is not allowed here; use ${methods.join(" or ")}`,
          );
        }
        throw new ProblemError("not-found", `No operation at ${ctx.method} ${ctx.path}; see the API reference`);
      }
    } catch (error) {
      if (ctx.headerSent) logger.error({ req_id: state.requestId, err: error }, "error after the response started");
      else {
        const problem = asProblem(error, { logger, requestId: state.requestId, storeOutage: options.storeOutage });
        if (problem.kind === "store-unavailable") options.storeOutage?.answered();
        renderProblem(ctx, problem, logger);
      }
    }
    // Set once the handler is done, as it may have replaced the id (with a run id): headers leave only
    // after this middleware (a forwarded call's, which sends them sooner, sets its own).
    if (!ctx.headerSent) ctx.set("X-Request-Id", state.requestId);
    if (options.responseCheck && state.route && !ctx.headerSent) {
      const mismatches = checkResponse(state.route, snapshot(ctx));
      if (mismatches.length) {
        logger.error(
          { req_id: state.requestId, operationId: state.route.operationId, mismatches },
          "response does not match the contract",
        );
        const error = new ProblemError(
          "internal",
          `Response of ${state.route.operationId} does not match the contract: ${mismatches.join("; ")}`,
        );
        renderProblem(ctx, error, logger);
      }
    }
    // An event stream's headers leave now, not with its first event: that may be long in coming (a silent
    // run's log, a generator before its first item), and the client learns meanwhile that it was accepted.
    if (!ctx.headerSent && ctx.body instanceof Stream && ctx.response.type === "text/event-stream") {
      ctx.flushHeaders();
    }
    const routeId = state.route?.operationId ?? null;
    // "close", not "finish": a call whose client went away is logged too (its run ended `cancelled`);
    // it may have closed already, while the handler ran.
    const onClose = () => {
      const durationMs = performance.now() - state.startedAt;
      const completed = ctx.res.writableFinished;
      if (completed) {
        options.onRequestFinished?.({ operationId: routeId, method: ctx.method, status: ctx.status, durationMs });
      }
      if (logsRequests) logRequest(ctx, { state, routeId, durationMs, completed });
    };
    if (ctx.res.closed) onClose();
    else ctx.res.once("close", onClose);
  });

  /** Writes the request's one line; a run it reports on (`logOutcome`) is waited for. */
  function logRequest(
    ctx: Context,
    request: { state: State; routeId: string | null; durationMs: number; completed: boolean },
  ): void {
    const { state } = request;
    const line: Record<string, unknown> = {
      req_id: ctx.response.get("X-Request-Id") || state.requestId,
      operationId: request.routeId,
      method: ctx.method,
      path: ctx.path,
      status: ctx.status,
      duration_ms: Math.round(request.durationMs * 100) / 100,
    };
    if (!request.completed) line.client_gone = true;
    if (state.logFields) Object.assign(line, state.logFields);
    const outcome = state.logOutcome;
    if (!outcome) logger.info(line, "request");
    else if (outcome.ended) logger.info(Object.assign(line, outcome.logFields()), "request");
    else void outcome.done.then(() => logger.info(Object.assign(line, outcome.logFields()), "request"));
  }

  // Before the dashboard and the router: a forwarded call carries no token and no session.
  if (options.forwardedCalls) {
    app.use(forwardedCalls({ ...options.forwardedCalls, bodyLimitBytes: options.bodyLimitBytes }));
  }

  const sessions = options.dashboard
    ? createDashboardSessions(options.dashboard.secrets, options.dashboard.records)
    : undefined;
  if (sessions) app.use(dashboardMiddleware({ sessions, verifier: options.verifier }));

  /** The `Authorization` header, else the dashboard session's token as one. */
  async function authorizationOf(ctx: Context): Promise<string | undefined> {
    const header = ctx.get("Authorization");
    if (header) return header;
    const token = await sessions?.tokenOf(ctx);
    return token === undefined ? undefined : `Bearer ${token}`;
  }

  /** The Koa handler of one operation: authenticate, read the body, decode, hand over, write the result. */
  function operationHandler(route: RouteSpec): (ctx: Context, params: Record<string, string>) => Promise<void> {
    const handler = options.handlers[route.operationId as OperationId] as unknown as (
      input: HandlerInput<OperationId>,
    ) => Promise<AnyHandlerResult>;
    return async (ctx, params) => {
      const state = ctx.state as State;
      state.route = route;
      const principal = route.auth === "bearer"
        ? await authenticate(options.verifier, {
          route,
          authorization: await authorizationOf(ctx),
          projectId: params.project_id,
        })
        : null;
      const body = route.body ? await readBody(ctx, route.body.contentTypes) : undefined;
      try {
        const decoded = decodeRequest(route, {
          params,
          query: ctx.query,
          header: (name) => headerValues(ctx.req, name.toLowerCase()),
          body: body?.value,
        });
        const input = new RequestInput(decoded, { principal, ids: state, instance: ctx.path, bodyText: body?.text });
        (ctx.res as ResponseWithInput)[INPUT] = input;
        ctx.res.on("close", onResponseClose);
        const result = await handler(input);
        writeResult(ctx, result);
      } finally {
        // A spooled body (a bundle) lives as long as its request: the handler has read it or failed.
        if (body?.value instanceof SpooledBody) await body.value.remove();
      }
    };
  }
  // The operation's handler; a request that names none is left for the first middleware (404 or 405).
  app.use(async (ctx) => {
    const found = router.find(ctx.method, ctx.path);
    if (found) await found.handle(ctx, found.params);
  });
  app.on("error", (error: Error & { code?: string }) => {
    if (error.code === "ECONNRESET" || error.code === "EPIPE" || error.code === "ERR_STREAM_PREMATURE_CLOSE") return;
    logger.warn({ err: error }, "connection error");
  });
  return app;
}
