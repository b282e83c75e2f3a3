/**
 * Safe retries, as Stripe's SDKs make them: a request that can do no harm twice is sent once more when its
 * connection broke before an answer came (reset, refused, closed mid-request) or the server answered 503.
 * Safe means a GET or HEAD, or a call carrying an `Idempotency-Key` — the server answers a repeated key
 * with the run its first use made, so the retry never starts a second run. Anything else (a sync or stream
 * run without a key, a deployment upload) is sent once: its first attempt may have started work that the
 * server cannot tell from a second one. Web platform only (the client runs in browsers too).
 */
import { sleep } from "./sleep.ts";

/** A `fetch` as openapi-fetch calls it: always with a `Request`. */
export type RunplaneFetch = (request: Request) => Promise<Response>;

/** The longest a retry waits for a 503's `Retry-After`, whatever it asks. */
export const MAX_RETRY_AFTER_MS = 5_000;

/** Sockets that broke before an answer came: Node's and undici's codes. */
const BROKEN_CONNECTION_CODES = new Set(["ECONNRESET", "ECONNREFUSED", "EPIPE", "UND_ERR_SOCKET"]);

/**
 * Whether `error` is a connection that broke before the answer came: `fetch failed` (or any error) whose
 * cause chain holds ECONNRESET, ECONNREFUSED, EPIPE or UND_ERR_SOCKET (undici's "other side closed"), or
 * node:http's "socket hang up". An abort, a timeout or a bad URL is not one.
 */
export function isConnectionFailure(error: unknown): boolean {
  return brokenConnectionCode(error) !== undefined;
}

/** The code that says how the connection broke (`ECONNRESET`, ...), if `error` is such a failure. */
function brokenConnectionCode(error: unknown, depth = 0): string | undefined {
  if (typeof error !== "object" || error === null || depth > 5) return undefined;
  const { code, message, cause, errors } = error as {
    code?: unknown;
    message?: unknown;
    cause?: unknown;
    errors?: unknown;
  };
  if (typeof code === "string" && BROKEN_CONNECTION_CODES.has(code)) return code;
  if (message === "socket hang up") return typeof code === "string" ? code : "ECONNRESET";
  // A refused connection to a name with several addresses is an AggregateError of one per address.
  if (Array.isArray(errors)) {
    for (const each of errors) {
      const found = brokenConnectionCode(each, depth + 1);
      if (found) return found;
    }
  }
  return brokenConnectionCode(cause, depth + 1);
}

/**
 * How long to wait before retrying: a 503's `Retry-After` (seconds, or an HTTP date), capped at
 * `MAX_RETRY_AFTER_MS`; without one (or after a broken connection), a jittered 200 to 500 ms so that
 * clients cut off together do not come back together.
 */
export function retryDelayMs(response?: Response, options: { now?: number; random?: () => number } = {}): number {
  const header = response?.headers.get("retry-after")?.trim();
  if (header) {
    const seconds = /^\d+$/.test(header) ? Number(header) * 1000 : Date.parse(header) - (options.now ?? Date.now());
    if (Number.isFinite(seconds)) return Math.min(MAX_RETRY_AFTER_MS, Math.max(0, seconds));
  }
  return 200 + Math.round((options.random ?? Math.random)() * 300);
}

/**
 * A call with an `Idempotency-Key` whose connection broke on each attempt: the server may have made
 * its run, so the message names the key; sending the same call with it again answers with that run (or
 * makes it, once).
 */
export class RunplaneConnectionError extends Error {
  /** The `Idempotency-Key` the call carried. */
  readonly idempotencyKey: string;
  /** How the connection broke on the last attempt: `ECONNRESET`, `ECONNREFUSED`, `UND_ERR_SOCKET`, ... */
  readonly code: string;
  /** How many times the call was sent. */
  readonly attempts: number;

  constructor(options: { url: string; idempotencyKey: string; attempts: number; cause: unknown }) {
    const code = brokenConnectionCode(options.cause) ?? "network error";
    const { origin } = new URL(options.url);
    super(
      `The connection to ${origin} broke (${code}) before the answer to a call with Idempotency-Key ${options.idempotencyKey} (attempt ${options.attempts} of ${options.attempts}); the server may have started its run: send the same call with that key again to get it (it never runs twice)`,
      { cause: options.cause },
    );
    this.name = "RunplaneConnectionError";
    this.idempotencyKey = options.idempotencyKey;
    this.code = code;
    this.attempts = options.attempts;
  }
}

/** Whether `request` can be sent twice without harm: a GET or HEAD, or a call with an `Idempotency-Key`. */
export function isSafeToRetry(request: Request): boolean {
  return request.method === "GET" || request.method === "HEAD" || request.headers.has("idempotency-key");
}

/**
 * Wraps `fetch` so that a request safe to retry (`isSafeToRetry`) is sent once more after a broken
 * connection or a 503, with the same `Idempotency-Key`, after `retryDelayMs`. Other requests pass through
 * untouched. When a keyed call's connection breaks on both attempts, one of them after the request went
 * out, it rejects with a `RunplaneConnectionError` naming the key; any other failure (a GET's, or a
 * connection refused both times, which never reached the server) is rethrown as it came.
 */
export function retryingFetch(fetch: RunplaneFetch): RunplaneFetch {
  return async function sendSafely(request: Request): Promise<Response> {
    if (!isSafeToRetry(request)) return await fetch(request);
    // The copy is taken before the first attempt reads the body.
    const spare = request.clone();
    let delay: number;
    // Whether an attempt may have reached the server: a refused connection sent nothing.
    let mayHaveReached = false;
    try {
      const response = await fetch(request);
      if (response.status !== 503) return response;
      delay = retryDelayMs(response);
      await response.body?.cancel();
    } catch (error) {
      if (request.signal.aborted || !isConnectionFailure(error)) throw error;
      mayHaveReached = brokenConnectionCode(error) !== "ECONNREFUSED";
      delay = retryDelayMs();
    }
    await sleep(delay, spare.signal);
    try {
      return await fetch(spare);
    } catch (error) {
      const key = spare.headers.get("idempotency-key");
      if (key === null || spare.signal.aborted || !isConnectionFailure(error)) throw error;
      if (!mayHaveReached && brokenConnectionCode(error) === "ECONNREFUSED") throw error;
      throw new RunplaneConnectionError({ url: spare.url, idempotencyKey: key, attempts: 2, cause: error });
    }
  };
}
