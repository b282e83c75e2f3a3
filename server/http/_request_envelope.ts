/**
 * The first middleware of the app: what every request gets around its operation. Its id and its place
 * in the drain gate, a 404 or 405 when no operation answered, errors as problem documents, the
 * `X-Request-Id` header, the response check against the contract, an event stream's early headers, and
 * once the response is closed its metrics and its log line.
 */
import { Stream } from "node:stream";
import type { Context, Middleware } from "koa";
import { ProblemError } from "../problems/mod.ts";
import type { HttpAppOptions } from "./_http_options.ts";
import { asProblem, renderProblem } from "./_problem_answers.ts";
import { logRequest } from "./_request_log.ts";
import { newRequestId, type RequestState } from "./_request_state.ts";
import { startEventWriter, type WrittenJson } from "./response_writer.ts";
import { checkResponse } from "./response_check.ts";
import type { OperationRouter } from "./routing.ts";

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

function snapshot(ctx: Context) {
  const type = ctx.response.type || undefined;
  let body: unknown;
  if (typeof ctx.body === "string" && type?.endsWith("json")) body = JSON.parse(ctx.body);
  else if (typeof ctx.body === "string") body = ctx.body;
  // A streamed JSON body is checked from the value it is being encoded from.
  else if (type?.endsWith("json")) body = (ctx.state as WrittenJson).jsonValue;
  return { status: ctx.status, headers: ctx.response.headers as Record<string, string>, contentType: type, body };
}

/** The middleware around every request of the app whose operations `router` finds. */
export function requestEnvelope(options: HttpAppOptions, router: OperationRouter<unknown>): Middleware {
  const { logger } = options;
  const logsRequests = logger.isLevelEnabled("info");
  return async (ctx, next) => {
    const state = ctx.state as RequestState;
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
    startEventWriter(ctx);
    const routeId = state.route?.operationId ?? null;
    // "close", not "finish": a call whose client went away is logged too (its run ended `cancelled`);
    // it may have closed already, while the handler ran.
    const onClose = () => {
      const durationMs = performance.now() - state.startedAt;
      const completed = ctx.res.writableFinished;
      if (completed) {
        options.onRequestFinished?.({ operationId: routeId, method: ctx.method, status: ctx.status, durationMs });
      }
      if (logsRequests) logRequest(ctx, { logger, state, routeId, durationMs, completed });
    };
    if (ctx.res.closed) onClose();
    else ctx.res.once("close", onClose);
  };
}
