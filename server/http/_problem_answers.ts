/** How an error becomes the request's problem document (RFC 9457). */
import type { Context } from "koa";
import type { Logger } from "../log.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import type { HttpAppOptions } from "./_http_options.ts";
import type { RequestState } from "./_request_state.ts";

/** The `Retry-After` of a store-unavailable answer, in seconds: about how often an outage is probed. */
const STORE_RETRY_AFTER_S = "2";

/** Writes `error` as the response; a server error other than the store's outage is logged. */
export function renderProblem(ctx: Context, error: ProblemError, logger: Logger): void {
  ctx.status = error.status;
  for (const [name, value] of Object.entries(error.options.headers ?? {})) ctx.set(name, value);
  ctx.type = "application/problem+json";
  ctx.body = JSON.stringify(error.toDocument(ctx.path));
  // An outage is logged once, with its count, by the store's outage record; not once per request.
  if (error.status >= 500 && error.kind !== "store-unavailable") {
    logger.warn(
      { req_id: (ctx.state as RequestState).requestId, problem: error.kind, detail: error.message },
      "request failed",
    );
  }
}

/** The problem `error` is answered as: itself, a 404, the store's outage, else a logged internal error. */
export function asProblem(
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
