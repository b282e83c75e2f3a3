/**
 * The Koa handler of each operation of the route table: authenticates, reads and decodes the request,
 * hands it to its handler from `server/handlers` and writes the result.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Context } from "koa";
import type { RouteSpec } from "../../generated/routes.ts";
import type { TokenVerifier } from "../auth/mod.ts";
import type { RequestState } from "./_request_state.ts";
import { authenticate } from "./authenticate.ts";
import type { DashboardSessions } from "./dashboard.ts";
import type { AnyHandlerResult, HandlerInput, Handlers, OperationId } from "./handler_types.ts";
import type { BodyReader } from "./read_body.ts";
import { passedRequestHeaders } from "./passed_headers.ts";
import { decodeRequest } from "./request_decoding.ts";
import { RequestInput } from "./request_input.ts";
import { writeResult } from "./response_writer.ts";
import { SpooledBody } from "./spool_body.ts";
import { StreamedBody } from "./streamed_body.ts";

const INPUT = Symbol("runplane.requestInput");
type ResponseWithInput = ServerResponse & { [INPUT]?: RequestInput };

/** One listener for every response (no closure per request): tells the handler's input its client left. */
function onResponseClose(this: ResponseWithInput): void {
  if (!this.writableFinished) this[INPUT]?.disconnect();
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

/** The `Authorization` header, else the dashboard session's token as one. */
async function authorizationOf(ctx: Context, sessions: DashboardSessions | undefined): Promise<string | undefined> {
  const header = ctx.get("Authorization");
  if (header) return header;
  const token = await sessions?.tokenOf(ctx);
  return token === undefined ? undefined : `Bearer ${token}`;
}

/** What the operations' handlers need. */
export interface OperationHandlerOptions {
  handlers: Handlers;
  verifier: TokenVerifier;
  readBody: BodyReader;
  /** The dashboard's sessions, whose tokens authenticate a request without `Authorization`. */
  sessions?: DashboardSessions;
}

/** The Koa handler of one operation: authenticate, read the body, decode, hand over, write the result. */
export function operationHandler(
  route: RouteSpec,
  options: OperationHandlerOptions,
): (ctx: Context, params: Record<string, string>) => Promise<void> {
  const { readBody } = options;
  const handler = options.handlers[route.operationId as OperationId] as unknown as (
    input: HandlerInput<OperationId>,
  ) => Promise<AnyHandlerResult>;
  return async (ctx, params) => {
    const state = ctx.state as RequestState;
    state.route = route;
    const principal = route.auth === "bearer"
      ? await authenticate(options.verifier, {
        route,
        authorization: await authorizationOf(ctx, options.sessions),
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
      const passed = route.restOfPath === null
        ? undefined
        : { method: ctx.method, query: ctx.querystring, headers: passedRequestHeaders(ctx.req.headers) };
      const input = new RequestInput(decoded, {
        principal,
        ids: state,
        instance: ctx.path,
        bodyText: body?.text,
        passed,
      });
      (ctx.res as ResponseWithInput)[INPUT] = input;
      ctx.res.on("close", onResponseClose);
      const result = await handler(input);
      writeResult(ctx, result);
    } finally {
      // A spooled body (a bundle) lives as long as its request: the handler has read it or failed.
      if (body?.value instanceof SpooledBody) await body.value.remove();
      // A streamed body the handler did not read whole (refused first, or midway): the rest is never uploaded.
      if (body?.value instanceof StreamedBody && !body.value.complete) ctx.set("Connection", "close");
    }
  };
}
