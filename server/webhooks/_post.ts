/** One webhook POST: pinned to the checked address, no redirects followed, bounded by a timeout. */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { AttemptOutcome } from "./retry_policy.ts";
import {
  DestinationRefusedError,
  type GuardOptions,
  literalDestination,
  pinnedLookup,
  resolveDestination,
  type ResolvedDestination,
} from "./destination_guard.ts";
import type { AbortSignalLike } from "../abort/mod.ts";
import { startLightDeadline } from "../deadline/mod.ts";

/** What one attempt sends. */
export interface PostRequest {
  url: URL;
  body: string;
  headers: Record<string, string>;
  timeoutMs: number;
  guard: GuardOptions;
  /** Ends the attempt early (the worker is stopping). */
  signal?: AbortSignalLike;
}

// Connections to a receiver are kept alive and reused: a delivery costs a request, not a TCP (and TLS)
// handshake. Reuse is safe for the SSRF guard: every pooled socket was connected through a pinned
// lookup to an address that passed it. An idle socket is closed after 4 s, before the usual 5 s
// keep-alive of servers, so a delivery is rarely sent on a socket the receiver is closing.
const POOL = { keepAlive: true, maxSockets: 64, maxFreeSockets: 64, scheduling: "lifo", timeout: 4_000 } as const;
const httpAgent = new HttpAgent(POOL);
const httpsAgent = new HttpsAgent(POOL);

function describe(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  const message = (error as Error).message ?? String(error);
  return code && !message.includes(code) ? `${code}: ${message}` : message;
}

/**
 * Posts once and says how it ended; never throws. The deadline is a light one (no `AbortSignal` per
 * attempt, see ../abort/mod.ts): when it ends, the request is destroyed.
 */
export async function postOnce(request: PostRequest): Promise<AttemptOutcome> {
  const timer = startLightDeadline(request.timeoutMs, { signal: request.signal });
  try {
    return await post(request, timer.signal);
  } finally {
    timer.clear();
  }
}

async function post(request: PostRequest, deadline: AbortSignalLike): Promise<AttemptOutcome> {
  let destination: ResolvedDestination;
  try {
    destination = literalDestination(request.url, request.guard) ?? await Promise.race([
      resolveDestination(request.url, request.guard),
      new Promise<never>((_, reject) =>
        deadline.addEventListener("abort", () => reject(deadline.reason), { once: true })
      ),
    ]);
  } catch (error) {
    if (error instanceof DestinationRefusedError) return { error: error.message, refused: true };
    if (deadline.aborted) return { error: `timed out after ${request.timeoutMs} ms resolving the host` };
    return { error: describe(error) };
  }
  const https = request.url.protocol === "https:";
  const send = https ? httpsRequest : httpRequest;
  return await new Promise<AttemptOutcome>((resolve) => {
    let settled = false;
    function settle(outcome: AttemptOutcome) {
      if (settled) return;
      settled = true;
      deadline.removeEventListener("abort", onDeadline);
      resolve(outcome);
    }
    const req = send(request.url, {
      method: "POST",
      headers: { ...request.headers, "Content-Length": String(Buffer.byteLength(request.body)) },
      lookup: pinnedLookup(destination),
      agent: https ? httpsAgent : httpAgent,
    });
    function onDeadline() {
      req.destroy(deadline.reason instanceof Error ? deadline.reason : new Error(String(deadline.reason)));
    }
    if (deadline.aborted) onDeadline();
    else deadline.addEventListener("abort", onDeadline, { once: true });
    req.once("response", (res: IncomingMessage) => {
      // Drain the answer so the attempt ends only when the receiver has finished it.
      res.resume();
      res.once("end", () => settle({ statusCode: res.statusCode ?? 0 }));
      res.once("error", () => {
        settle(
          deadline.aborted
            ? { error: `timed out after ${request.timeoutMs} ms reading the answer` }
            : { statusCode: res.statusCode ?? 0 },
        );
      });
    });
    req.once("error", (error) => {
      settle(deadline.aborted ? { error: `timed out after ${request.timeoutMs} ms` } : { error: describe(error) });
    });
    req.end(request.body);
  });
}
