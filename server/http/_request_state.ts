/** What the HTTP layer keeps of a request in Koa's `ctx.state`, and the request's id. */
import type { RouteSpec } from "../../generated/routes.ts";
import { randomBytesPooled } from "../random/mod.ts";
import type { LoggedOutcome } from "./handler_types.ts";

/** A request's `ctx.state`. */
export interface RequestState {
  requestId: string;
  route?: RouteSpec;
  startedAt: number;
  /** Set by the handler (`logFields`, `logOutcome`): what the request's log line adds. */
  logFields?: Record<string, unknown>;
  logOutcome?: LoggedOutcome;
}

/** A new request id: `req_` and 16 random base64url characters. */
export function newRequestId(): string {
  return `req_${randomBytesPooled(12).toString("base64url")}`;
}
