/** The one log line of a request. */
import type { Context } from "koa";
import type { Logger } from "../log.ts";
import type { RequestState } from "./_request_state.ts";

/** What `logRequest` writes of a request. */
export interface LoggedRequest {
  logger: Logger;
  state: RequestState;
  routeId: string | null;
  durationMs: number;
  completed: boolean;
}

/** Writes the request's one line; a run it reports on (`logOutcome`) is waited for. */
export function logRequest(ctx: Context, request: LoggedRequest): void {
  const { logger, state } = request;
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
