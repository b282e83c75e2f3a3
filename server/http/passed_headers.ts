/**
 * What of a request reaches a custom runtime's route, and what of its answer reaches the caller, when a
 * call by another method than POST is passed through (`callApp…`). One place says which headers pass and
 * why; a POST's function call passes none of the caller's.
 */
import type { IncomingHttpHeaders } from "node:http";

/**
 * Request headers that never reach the app: the caller's credentials (the bearer token, the dashboard's
 * session cookie), hop-by-hop headers (RFC 9110 §7.6.1), those the hop sets itself (`Host`, the body's
 * length), `Accept-Encoding` (so the answer arrives readable, for the run's record as for the caller),
 * and Runplane's own (`X-Request-Id` becomes the run id; webhook, idempotency and internal headers).
 */
const DROPPED_REQUEST = new Set([
  "authorization",
  "proxy-authorization",
  "cookie",
  "host",
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "expect",
  "content-length",
  "accept-encoding",
  "x-request-id",
  "x-webhook-secret",
  "idempotency-key",
]);

/**
 * Answer headers that never reach the caller: hop-by-hop ones, the body's length (the body is streamed
 * as it comes), `X-Request-Id` (the run id is Runplane's), and those that would let the app act as the
 * API's own origin, which the dashboard shares: cookies and a policy of its own (replaced by `sandbox`).
 */
const DROPPED_ANSWER = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "content-length",
  "x-request-id",
  "set-cookie",
  "set-cookie2",
  "content-security-policy",
  "content-security-policy-report-only",
  "x-content-type-options",
]);

/** The request's headers that reach the app, as name (lowercase) and value, a repeated one once per value. */
export function passedRequestHeaders(headers: IncomingHttpHeaders): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || DROPPED_REQUEST.has(name) || name.startsWith("x-runplane-")) continue;
    for (const one of Array.isArray(value) ? value : [value]) pairs.push([name, one]);
  }
  return pairs;
}

/**
 * The app's answer headers that reach the caller, with the two that keep its body from acting as the
 * API's origin (`Content-Security-Policy: sandbox`, `X-Content-Type-Options: nosniff`). A HEAD answer
 * keeps its `Content-Length`: it is the length a GET would have.
 */
export function passedAnswerHeaders(
  headers: Array<[string, string]>,
  options: { head: boolean },
): Record<string, string | string[]> {
  const passed: Record<string, string | string[]> = {};
  for (const [raw, value] of headers) {
    const name = raw.toLowerCase();
    if (DROPPED_ANSWER.has(name) && !(options.head && name === "content-length")) continue;
    if (name.startsWith("x-runplane-")) continue;
    const had = passed[name];
    passed[name] = had === undefined ? value : [...(Array.isArray(had) ? had : [had]), value];
  }
  passed["content-security-policy"] = "sandbox";
  passed["x-content-type-options"] = "nosniff";
  return passed;
}
