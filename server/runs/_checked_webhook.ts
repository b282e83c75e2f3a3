/** A call's webhook, checked and sealed before its run is created. */
import { ProblemError } from "../problems/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import { checkEndpointUrl, DestinationRefusedError, takeEndpointCredentials } from "../webhooks/mod.ts";
import type { CheckedWebhook } from "./_live_run.ts";
import type { RunSettings } from "./_service_types.ts";
import type { RunCall } from "./run_call.ts";

/** What `checkWebhook` needs. */
export interface CheckWebhookOptions {
  /** Seals the webhook's secret and credentials. */
  secrets: SecretBox;
  /** The settings runs follow (`webhookAllowPrivate`). */
  config: RunSettings;
}

/**
 * The call's webhook with its endpoint checked (without user information) and its secret and
 * credentials sealed, or null without one; a 400 problem for an endpoint that is malformed, not
 * http(s) or a refused address.
 */
export function checkWebhook(call: RunCall, options: CheckWebhookOptions): CheckedWebhook | null {
  const { secrets, config } = options;
  if (!call.webhook) return null;
  try {
    const url = checkEndpointUrl(call.webhook.endpoint, { allowPrivate: config.webhookAllowPrivate });
    const credentials = takeEndpointCredentials(url);
    return {
      endpoint: url.href,
      sealed: call.webhook.secret ? secrets.seal(call.webhook.secret) : null,
      credentials: credentials === null ? null : secrets.seal(credentials),
    };
  } catch (error) {
    if (!(error instanceof DestinationRefusedError)) throw error;
    throw new ProblemError("validation", error.message, {
      errors: [{ path: "query.webhookEndpoint", message: error.message }],
    });
  }
}
