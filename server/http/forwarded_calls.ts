/**
 * The internal endpoint another host of the cluster forwards calls to:
 * `POST /internal/v1/calls/{project}/{app}/{function}`. It is not part of the public contract (no
 * operation in `spec/`, no token): only a call carrying a valid `X-Runplane-Forwarded` credential,
 * derived from the master key every process shares, is run, on this host's own replicas, and answered
 * with NDJSON frames as they are produced.
 */
import { Readable } from "node:stream";
import type { Context, Middleware, Next } from "koa";
import {
  decodeHttpPart,
  FORWARD_HTTP_HEADER,
  FORWARD_PATH,
  type ForwardKey,
  serveForwardedCall,
  verifyForward,
} from "../cluster/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import type { RunExecutor } from "../runs/mod.ts";

/** What the endpoint needs. */
export interface ForwardedCallsOptions {
  key: ForwardKey;
  /** This host's own executor: a forwarded call is never forwarded again. */
  executor: RunExecutor;
  /** The largest body, as for a call made directly. */
  bodyLimitBytes: number;
  /** The clock a credential's time is checked against (the store's); default `Date.now`. */
  now?(): number;
}

const CALL_PATH = new RegExp(`^${FORWARD_PATH}/([^/]+)/([^/]+)/([^/]*)$`);

/** The body, refused past `limitBytes` (413). */
async function readBody(ctx: Context, limitBytes: number): Promise<Buffer> {
  const declared = Number(ctx.get("Content-Length") || 0);
  const tooLarge = () =>
    new ProblemError("content-too-large", `The forwarded call's body is larger than ${limitBytes} bytes`);
  if (declared > limitBytes) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limitBytes) throw tooLarge();
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/** `X-Runplane-Deadline-Ms`: milliseconds left, or undefined when absent or not a count. */
function deadlineOf(ctx: Context): number | undefined {
  const text = ctx.get("X-Runplane-Deadline-Ms");
  return /^\d{1,12}$/.test(text) ? Number(text) : undefined;
}

function segment(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new ProblemError("bad-request", "The forwarded call's path is not valid percent-encoding");
  }
}

/**
 * The middleware of the endpoint, mounted before the router. A request without a valid credential is
 * answered 401 before its body is read and runs nothing. The call is stopped when the forwarding host's
 * connection closes before the answer ended.
 */
export function forwardedCalls(options: ForwardedCallsOptions): Middleware {
  const now = options.now ?? Date.now;
  return async function forwardedCall(ctx: Context, next: Next) {
    const match = CALL_PATH.exec(ctx.path);
    if (!match) return next();
    if (ctx.method !== "POST") {
      ctx.set("Allow", "POST");
      throw new ProblemError("method-not-allowed", `${ctx.method} is not allowed here; use POST`);
    }
    const [projectId, appId, functionName] = match.slice(1).map(segment);
    const runId = ctx.get("X-Request-Id");
    const fields = { runId, projectId, appId, functionName };
    if (!runId || !verifyForward(options.key, ctx.get("X-Runplane-Forwarded"), fields, { now: now() })) {
      throw new ProblemError(
        "unauthorized",
        "This endpoint takes calls forwarded by another Runplane process with the same master key only",
      );
    }
    const body = await readBody(ctx, options.bodyLimitBytes);
    // A call of a custom runtime's route by another method: its body is the app's, as sent.
    const httpHeader = ctx.get(FORWARD_HTTP_HEADER);
    const http = httpHeader ? decodeHttpPart(httpHeader, body) : undefined;
    const inputJson = http ? "" : body.toString("utf8");
    const controller = new AbortController();
    ctx.res.once("close", () => {
      if (!ctx.res.writableFinished) controller.abort();
    });
    const frames = serveForwardedCall(
      {
        projectId,
        appId,
        functionName,
        inputJson,
        http,
        runId,
        deadlineMs: deadlineOf(ctx),
        signal: controller.signal,
      },
      options.executor,
    );
    ctx.status = 200;
    ctx.type = "application/x-ndjson";
    ctx.set("Cache-Control", "no-cache");
    ctx.set("X-Request-Id", runId);
    // Each frame must leave as soon as it is written.
    ctx.req.socket.setNoDelay(true);
    ctx.body = Readable.from(frames, { objectMode: false });
    // The forwarding host learns at once that the call was taken: from here on it is not tried elsewhere.
    ctx.flushHeaders();
  };
}
