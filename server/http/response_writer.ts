import { Readable } from "node:stream";
import { setImmediate as nextTurn } from "node:timers/promises";
import type { Context } from "koa";
import type { AnyHandlerResult, PassedBody } from "./handler_types.ts";
import { type EventWriter, isEventWriter } from "./sse.ts";
import { encodeIfSmall, jsonChunks } from "./json_stream.ts";

const JSON_UTF8 = "application/json; charset=utf-8";

/** Where `writeResult` leaves a JSON body's value, so the contract check can validate a streamed body. */
export interface WrittenJson {
  jsonValue?: unknown;
}

/** Where `writeResult` leaves an event stream that writes itself (`eventStream`), for `startEventWriter`. */
export interface PendingEvents {
  eventWriter?: EventWriter;
}

/**
 * Starts the event stream `writeResult` left in `ctx` (its headers leave now), or cancels it when the
 * answer became another one since (a problem: Koa sends that).
 */
export function startEventWriter(ctx: Context): void {
  const state = ctx.state as PendingEvents;
  const writer = state.eventWriter;
  if (!writer) return;
  state.eventWriter = undefined;
  if (ctx.body !== undefined || ctx.headerSent) {
    ctx.respond = true;
    writer.cancel();
    return;
  }
  ctx.flushHeaders();
  writer.writeTo(ctx.res);
}

/**
 * Writes a handler's result to the Koa context. JSON that fits in one chunk is sent whole (with a
 * Content-Length); a larger value is encoded and written chunk by chunk, never held as one string. SSE
 * is streamed as it comes.
 */
export function writeResult(ctx: Context, result: AnyHandlerResult): void {
  ctx.status = result.status;
  for (const [name, value] of Object.entries(result.headers ?? {})) ctx.set(name, value);
  if (result.contentType === undefined || result.body === undefined) {
    ctx.body = null;
    if (result.status !== 304 && result.status !== 204) ctx.status = result.status;
    // Koa dropped the body's headers with it: a HEAD answer keeps those it was given.
    for (const [name, value] of Object.entries(result.headers ?? {})) ctx.set(name, value);
    return;
  }
  if (result.contentType === "*/*") {
    // Passed through as it comes (its `Content-Type`, if any, is among the headers); each piece leaves as
    // soon as it is written, as a stream's events do.
    ctx.req.socket.setNoDelay(true);
    ctx.body = Readable.from(result.body as PassedBody, { objectMode: false });
    if (!result.headers?.["Content-Type"]) ctx.remove("Content-Type");
    return;
  }
  if (result.contentType === "application/octet-stream") {
    // A file, streamed (its handler sets Content-Length among the headers).
    const length = result.headers?.["Content-Length"];
    ctx.body = Readable.from(result.body as PassedBody, { objectMode: false });
    ctx.type = "application/octet-stream";
    if (typeof length === "string") ctx.length = Number(length);
    return;
  }
  if (result.contentType === "text/event-stream") {
    ctx.set("Cache-Control", "no-cache");
    ctx.set("X-Accel-Buffering", "no");
    ctx.type = "text/event-stream; charset=utf-8";
    // Each event must leave as soon as it is written.
    ctx.req.socket.setNoDelay(true);
    if (isEventWriter(result.body)) {
      // It writes itself once the request's middleware is done (`startEventWriter`); Koa leaves the
      // response alone.
      ctx.respond = false;
      (ctx.state as PendingEvents).eventWriter = result.body;
      return;
    }
    ctx.body = Readable.from(result.body as AsyncIterable<string | Uint8Array>, { objectMode: false });
    return;
  }
  if (result.contentType.endsWith("json")) {
    // The header itself, not Koa's `type`, which looks the type up in mime-types on every call.
    ctx.set("Content-Type", result.contentType === "application/json" ? JSON_UTF8 : result.contentType);
    (ctx.state as WrittenJson).jsonValue = result.body;
    const whole = encodeIfSmall(result.body);
    if (whole !== undefined) {
      ctx.body = whole;
      return;
    }
    const chunks = jsonChunks(result.body);
    const first = chunks.next();
    const second = first.done ? first : chunks.next();
    if (second.done) {
      ctx.body = first.done ? "null" : first.value;
      return;
    }
    ctx.body = Readable.from(prepend([first.value as string, second.value], chunks), { objectMode: false });
    return;
  }
  // A handler may name a more precise type (Prometheus: `text/plain; version=0.0.4; charset=utf-8`).
  if (!(ctx.response.get("Content-Type") ?? "").startsWith(result.contentType)) {
    ctx.type = `${result.contentType}; charset=utf-8`;
  }
  ctx.body = String(result.body);
}

/** How many characters of a chunked JSON body are written per turn of the event loop. */
const CHARS_PER_TURN = 1024 * 1024;

/**
 * `head`, then the rest, yielding to the event loop after each `CHARS_PER_TURN` characters: a socket to a
 * fast reader takes megabytes without pushing back, so a 50 MB answer would otherwise be encoded and
 * written in turns of tens of milliseconds while other requests wait.
 */
async function* prepend(head: string[], rest: Iterator<string, void, undefined>): AsyncGenerator<string> {
  yield* head;
  let written = 0;
  for (let next = rest.next(); !next.done; next = rest.next()) {
    yield next.value;
    written += next.value.length;
    if (written >= CHARS_PER_TURN) {
      written = 0;
      await nextTurn();
    }
  }
}
