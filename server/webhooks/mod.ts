/**
 * Webhook forwarding: the signer, the destination guard, the durable outbox and the delivery worker
 * with the retry table.
 */
export {
  type DeliveryHandOff,
  type DeliveryWorker,
  type DeliveryWorkerOptions,
  startDeliveryWorker,
} from "./delivery_worker.ts";
export {
  checkEndpointUrl,
  DestinationRefusedError,
  forbiddenAddressReason,
  type GuardOptions,
  pinnedLookup,
  resolveDestination,
} from "./destination_guard.ts";
export { basicAuthorization, takeEndpointCredentials } from "./endpoint_credentials.ts";
export {
  type ClaimedDelivery,
  type DeliveryLease,
  deleteDeliveriesOf,
  enqueueDelivery,
  forgetDeliverySecrets,
  redeliver,
  type RedeliveryRefusal,
  type NewDelivery,
  putEndDelivery,
  releaseDeliveryLeases,
  type WebhookBody,
  webhookBody,
  webhookViews,
  type WebhookView,
} from "./outbox.ts";
export { REDELIVERY_LIMIT, type RedeliveryLimit, takeRedelivery } from "./redelivery_limit.ts";
export { type AttemptOutcome, type AttemptVerdict, judgeAttempt, MAX_ATTEMPTS } from "./retry_policy.ts";
export { signWebhook, type SignedParts, webhookHeaderNames, type WebhookHeaderNames } from "./signer.ts";
