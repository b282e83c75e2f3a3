/**
 * Checking a Runplane webhook delivery: the `v1,` HMAC-SHA256 signature over
 * `run_id + "." + timestamp + "." + body` (the raw bytes received), compared in constant time, and the
 * timestamp's age (replay protection). Web Crypto only, so it runs in Node, Deno, Bun and workers.
 */

/** Header values as `Headers`, a Node `IncomingMessage.headers`, or a plain object (any name case). */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

/** Options of `verifyWebhook`: the secret, and a `request`, or `headers` plus the raw `body`. */
export interface VerifyWebhookOptions {
  /** The `X-Webhook-Secret` the run was called with. */
  secret: string;
  /**
   * A web `Request` (its body is read from a clone), or a Node `IncomingMessage` (pass its raw `body`
   * too: the signature covers the exact bytes, so a re-serialised JSON object does not verify).
   */
  request?: Request | { headers: Record<string, string | string[] | undefined> };
  /** The delivery's headers, when no `request` is given. */
  headers?: WebhookHeaders;
  /** The raw body: bytes, or the text exactly as received. */
  body?: Uint8Array | ArrayBuffer | string;
  /** How old (or how far in the future) the timestamp may be, in seconds; default 300. */
  toleranceSeconds?: number;
  /** The vendor word of the signature headers (`X-<vendor>-Webhook-Signature`); default `Runplane`. */
  vendor?: string;
  /** The current time in milliseconds (default `Date.now()`), for tests and replays. */
  now?: number;
}

/** The outcome: `valid` with the run id and timestamp, or not, with the reason. */
export type WebhookVerification =
  | { valid: true; runId: string; timestamp: number }
  | { valid: false; reason: string; runId?: string; timestamp?: number };

function header(headers: WebhookHeaders, name: string): string | undefined {
  if (headers instanceof Headers) return headers.get(name) ?? undefined;
  const lower = name.toLowerCase();
  for (const [key, value] of Object.entries(headers)) {
    if (key.toLowerCase() === lower) return Array.isArray(value) ? value.join(", ") : value;
  }
  return undefined;
}

function hexToBytes(hex: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^(?:[0-9a-f]{2})+$/i.test(hex)) return undefined;
  const bytes = new Uint8Array(new ArrayBuffer(hex.length / 2));
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(i * 2, i * 2 + 2), 16);
  return bytes;
}

async function rawBody(options: VerifyWebhookOptions): Promise<Uint8Array | undefined> {
  const { body, request } = options;
  if (body !== undefined) {
    if (typeof body === "string") return new TextEncoder().encode(body);
    return body instanceof Uint8Array ? body : new Uint8Array(body);
  }
  if (request instanceof Request) return new Uint8Array(await request.clone().arrayBuffer());
  return undefined;
}

/**
 * Verifies a webhook delivery. Resolves with `{ valid: false, reason }` (never throws) when a header
 * is missing or malformed, the timestamp is outside the tolerance, or no `v1` signature matches; throws
 * a `TypeError` only for a call without headers or body. Several space-separated signatures (during a
 * secret rotation) are accepted when any one matches.
 */
export async function verifyWebhook(options: VerifyWebhookOptions): Promise<WebhookVerification> {
  const headers = options.headers ?? options.request?.headers;
  if (!headers) throw new TypeError("Pass the delivery's request, or its headers and raw body");
  const body = await rawBody(options);
  if (!body) throw new TypeError("Pass the delivery's raw body: the signature covers the exact bytes received");
  const vendor = options.vendor ?? "Runplane";
  const tolerance = options.toleranceSeconds ?? 300;

  const runId = header(headers, "x-request-id")?.trim();
  if (!runId) return { valid: false, reason: "The X-Request-Id header (the run id) is missing" };
  const timestampText = header(headers, `x-${vendor}-webhook-timestamp`)?.trim();
  if (!timestampText) return { valid: false, runId, reason: `The X-${vendor}-Webhook-Timestamp header is missing` };
  if (!/^\d{1,12}$/.test(timestampText)) {
    return { valid: false, runId, reason: `The X-${vendor}-Webhook-Timestamp header is not Unix seconds` };
  }
  const timestamp = Number(timestampText);
  const signatures = (header(headers, `x-${vendor}-webhook-signature`) ?? "").split(/\s+/).filter(Boolean);
  const candidates = signatures.filter((s) => s.startsWith("v1,")).map((s) => hexToBytes(s.slice(3)));
  if (candidates.length === 0) {
    return { valid: false, runId, timestamp, reason: `The X-${vendor}-Webhook-Signature header has no v1 signature` };
  }
  const age = (options.now ?? Date.now()) / 1000 - timestamp;
  if (Math.abs(age) > tolerance) {
    return {
      valid: false,
      runId,
      timestamp,
      reason: `The timestamp is ${Math.round(Math.abs(age))} s ${
        age > 0 ? "old" : "in the future"
      }, beyond the ${tolerance} s tolerance`,
    };
  }
  const encoder = new TextEncoder();
  const key = await crypto.subtle.importKey(
    "raw",
    encoder.encode(options.secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["verify"],
  );
  const prefix = encoder.encode(`${runId}.${timestamp}.`);
  const signed = new Uint8Array(prefix.length + body.length);
  signed.set(prefix);
  signed.set(body, prefix.length);
  for (const candidate of candidates) {
    // crypto.subtle.verify compares in constant time.
    if (candidate && (await crypto.subtle.verify("HMAC", key, candidate, signed))) {
      return { valid: true, runId, timestamp };
    }
  }
  return {
    valid: false,
    runId,
    timestamp,
    reason: "The signature does not match: a wrong secret, or the body was changed",
  };
}
