import { Readable } from "node:stream";
import type { Context } from "koa";
import type { AnyHandlerResult, EventStreamBody } from "./handler_types.ts";

/** Writes a handler's result to the Koa context: JSON serialised once, SSE streamed as it comes. */
export function writeResult(ctx: Context, result: AnyHandlerResult): void {
  ctx.status = result.status;
  for (const [name, value] of Object.entries(result.headers ?? {})) ctx.set(name, value);
  if (result.contentType === undefined || result.body === undefined) {
    ctx.body = null;
    if (result.status !== 304 && result.status !== 204) ctx.status = result.status;
    return;
  }
  if (result.contentType === "text/event-stream") {
    ctx.set("Cache-Control", "no-cache");
    ctx.set("X-Accel-Buffering", "no");
    ctx.type = "text/event-stream; charset=utf-8";
    // Each event must leave as soon as it is written.
    ctx.req.socket.setNoDelay(true);
    ctx.body = Readable.from(result.body as EventStreamBody, { objectMode: false });
    return;
  }
  if (result.contentType.endsWith("json")) {
    ctx.type = result.contentType === "application/json" ? "application/json; charset=utf-8" : result.contentType;
    ctx.body = JSON.stringify(result.body);
    return;
  }
  // A handler may name a more precise type (Prometheus: `text/plain; version=0.0.4; charset=utf-8`).
  if (!ctx.response.get("Content-Type").startsWith(result.contentType)) ctx.type = `${result.contentType}; charset=utf-8`;
  ctx.body = String(result.body);
}
