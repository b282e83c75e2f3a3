/**
 * A POST to a deployed app's external runtime, held to the webhooks' destination rules: the host is
 * resolved and every address checked at each call (DNS may change between calls), and the connection
 * goes to the very address that was checked. No redirect is followed.
 */
import { Agent as HttpAgent, type IncomingMessage, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { Readable } from "node:stream";
import { type GuardOptions, pinnedLookup, resolveDestination } from "../webhooks/mod.ts";

/** What `guardedPost` sends. */
export interface GuardedPost {
  /** Default `POST`. */
  method?: string;
  headers: Record<string, string>;
  body: string | Uint8Array;
  signal: AbortSignal;
  guard: GuardOptions;
}

// Pooled sockets are safe to reuse: each was connected through a pinned lookup to an address that passed.
const POOL = { keepAlive: true, maxSockets: 256, maxFreeSockets: 64, scheduling: "lifo", timeout: 4_000 } as const;
const httpAgent = new HttpAgent(POOL);
const httpsAgent = new HttpsAgent(POOL);

/** `work`, or the signal's reason as soon as it aborts (a DNS lookup cannot be stopped, only left). */
async function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  signal.throwIfAborted();
  let onAbort = () => {};
  try {
    return await Promise.race([
      work,
      new Promise<never>((_, reject) => {
        onAbort = () => reject(signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
      }),
    ]);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

const NULL_BODY = new Set([204, 205, 304]);

function toResponse(res: IncomingMessage): Response {
  const status = res.statusCode ?? 0;
  if (status < 200 || status > 599) {
    res.destroy();
    throw new Error(`the upstream answered status ${status}`);
  }
  const headers = new Headers();
  for (const [name, value] of Object.entries(res.headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  if (NULL_BODY.has(status)) {
    res.resume();
    return new Response(null, { status, headers });
  }
  return new Response(Readable.toWeb(res) as ReadableStream<Uint8Array>, { status, headers });
}

/**
 * POSTs `request.body` (or sends it with `request.method`) to `url` once its destination passed the guard; resolves with the answer as a
 * `Response` (its body streamed). Throws `DestinationRefusedError` when an address of the host is
 * refused, before anything is sent.
 */
export async function guardedPost(url: URL, request: GuardedPost): Promise<Response> {
  const destination = await abortable(resolveDestination(url, request.guard), request.signal);
  const https = url.protocol === "https:";
  const send = https ? httpsRequest : httpRequest;
  return await new Promise<Response>((resolve, reject) => {
    const req = send(url, {
      method: request.method ?? "POST",
      headers: { ...request.headers, "content-length": String(Buffer.byteLength(request.body)) },
      lookup: pinnedLookup(destination),
      agent: https ? httpsAgent : httpAgent,
      signal: request.signal,
    });
    req.once("response", (res) => {
      try {
        resolve(toResponse(res));
      } catch (error) {
        reject(error);
      }
    });
    req.once("error", reject);
    req.end(request.body);
  });
}
