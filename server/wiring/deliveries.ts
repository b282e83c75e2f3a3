/** The webhook deliveries of this process: the delivery worker (none on a host's worker) and its wake-ups. */
import type { Config } from "../config.ts";
import type { HostRole } from "../host/mod.ts";
import type { Logger } from "../log.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { Store } from "../store/mod.ts";
import { type DeliveryWorker, startDeliveryWorker } from "../webhooks/mod.ts";

/** Options of `startDeliveries`. */
export interface DeliveriesOptions {
  store: Store;
  secrets: SecretBox;
  logger: Logger;
  metrics: Metrics;
  /** This process's lease owner id. */
  owner: string;
  /** A host's worker delivers nothing: its supervisor does. */
  role?: HostRole;
}

/** This process's deliveries. */
export interface ServerDeliveries {
  /** The delivery worker; none on a host's worker. */
  worker?: DeliveryWorker;
  /** Says that deliveries were committed: wakes this worker, and (shared store, or a host) the other processes'. */
  added(): void;
}

/** Starts the delivery worker, unless this process is a host's worker. */
export function startDeliveries(config: Config, options: DeliveriesOptions): ServerDeliveries {
  const { store, logger, role } = options;
  const worker = role?.kind === "worker" ? undefined : startDeliveryWorker({
    owner: options.owner,
    db: store.db,
    secrets: options.secrets,
    logger,
    headerVendor: config.webhookHeaderVendor,
    timeoutMs: config.webhookTimeoutMs,
    perDestination: config.webhookPerDestination,
    retryDelayMs: config.webhookRetryDelayMs,
    guard: { allowPrivate: config.webhookAllowPrivate },
    metrics: options.metrics,
    wakeUps: store.notifier,
    now: store.clock.now,
  });
  // A delivery committed here wakes this worker at once, and (shared store) the other processes' ones:
  // one wake-up in flight at a time is enough, they only shorten the next poll.
  let announcing = false;
  function added(): void {
    worker?.wake();
    if ((!store.shared && !role) || announcing) return;
    announcing = true;
    store.notifier.notify("runplane_deliveries").catch((error) =>
      logger.warn({ err: error }, "announcing webhook deliveries failed; other processes poll for them")
    ).finally(() => (announcing = false));
  }
  return { worker, added };
}
