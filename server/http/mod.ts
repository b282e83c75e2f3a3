/**
 * The Koa app: request ids, problem documents, auth, body limits and validation, all driven by the
 * generated route table; handlers are plain functions from `server/handlers`.
 */
import Koa from "koa";
import { routes } from "../../generated/routes.ts";
import type { HttpAppOptions } from "./_http_options.ts";
import { operationHandler } from "./_operation_handler.ts";
import { requestEnvelope } from "./_request_envelope.ts";
import { createDashboardSessions, dashboardMiddleware } from "./dashboard.ts";
import { createBodyReader } from "./read_body.ts";
import { forwardedCalls } from "./forwarded_calls.ts";
import { createOperationRouter } from "./routing.ts";

export { type FinishedRequest, type HttpAppOptions } from "./_http_options.ts";
export { newRequestId } from "./_request_state.ts";
export { type ByteRange, parseByteRange } from "./byte_range.ts";
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
  PassedBody,
  PassedRequest,
} from "./handler_types.ts";
export { passedAnswerHeaders, passedRequestHeaders } from "./passed_headers.ts";
export { checkResponse, type ResponseSnapshot } from "./response_check.ts";
export { SpooledBody } from "./spool_body.ts";
export {
  eventStream,
  type EventWriter,
  type EventStreamOptions,
  type FrameOptions,
  formatServerSentEvent,
  frameEvent,
  frameEventBytes,
  type HeartbeatOptions,
  type ServerSentEventMessage,
  SSE_PING,
  wantsEventStream,
  withHeartbeat,
} from "./sse.ts";
export { StreamedBody } from "./streamed_body.ts";
export { createWebSocketUpgrades, type WebSocketUpgradeOptions, type WebSocketUpgrades } from "./websocket_upgrade.ts";

/** Creates the Koa app serving every operation of the route table. */
export function createHttpApp(options: HttpAppOptions): Koa {
  const { logger } = options;
  const app = new Koa();
  const readBody = createBodyReader({
    json: options.bodyLimitBytes,
    bytes: options.bundleLimitBytes,
    spoolDir: options.spoolDir,
  });
  const sessions = options.dashboard
    ? createDashboardSessions(options.dashboard.secrets, options.dashboard.records)
    : undefined;
  // Each operation's handler (its requests read the dashboard's sessions).
  const router = createOperationRouter(
    routes,
    (route) => operationHandler(route, { handlers: options.handlers, verifier: options.verifier, readBody, sessions }),
  );

  app.use(requestEnvelope(options, router));

  // Before the dashboard and the router: a forwarded call carries no token and no session.
  if (options.forwardedCalls) {
    app.use(forwardedCalls({ ...options.forwardedCalls, bodyLimitBytes: options.bodyLimitBytes }));
  }

  if (sessions) app.use(dashboardMiddleware({ sessions, verifier: options.verifier }));

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
