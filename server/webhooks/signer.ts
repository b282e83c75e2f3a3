/**
 * Webhook signatures: `v1,` + lowercase hex HMAC-SHA256, keyed with the call's `X-Webhook-Secret`, over
 * `run_id + "." + timestamp + "." + body`, where body is exactly the bytes sent.
 */
import { createHmac } from "node:crypto";

/** What a signature covers. */
export interface SignedParts {
  runId: string;
  /** Unix seconds, as sent in the timestamp header. */
  timestamp: number;
  /** The exact request body. */
  body: string | Uint8Array;
}

/** Signs one delivery; the same parts and secret always give the same signature. */
export function signWebhook(secret: string, parts: SignedParts): string {
  const hmac = createHmac("sha256", secret);
  hmac.update(`${parts.runId}.${parts.timestamp}.`, "utf8");
  hmac.update(parts.body);
  return `v1,${hmac.digest("hex")}`;
}

/** The names of the two signature headers for a vendor word (default `Runplane`). */
export interface WebhookHeaderNames {
  timestamp: string;
  signature: string;
}

/** The signature header names for `vendor`: `X-<vendor>-Webhook-Timestamp` and `X-<vendor>-Webhook-Signature`. */
export function webhookHeaderNames(vendor: string): WebhookHeaderNames {
  return { timestamp: `X-${vendor}-Webhook-Timestamp`, signature: `X-${vendor}-Webhook-Signature` };
}
