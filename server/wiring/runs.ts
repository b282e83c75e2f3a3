/** The runs of this process: the run service over the executors placement chose, and the run change feed. */
import type { Config } from "../config.ts";
import type { Metrics } from "../metrics/mod.ts";
import type { Logger } from "../log.ts";
import type { Executors } from "../placement/mod.ts";
import {
  createRunChangeFeed,
  createRunService,
  type RunChangeFeed,
  type RunLogWriter,
  type RunService,
  runOwnersDir,
} from "../runs/mod.ts";
import type { SecretBox } from "../secrets/mod.ts";
import type { Store, StoreOutage } from "../store/mod.ts";
import type { ServerDeliveries } from "./deliveries.ts";

/** Options of `wireRuns`. */
export interface RunsOptions {
  store: Store;
  outage: StoreOutage;
  secrets: SecretBox;
  logger: Logger;
  metrics: Metrics;
  /** This process's lease owner id. */
  owner: string;
  /** From `placeExecutors`: which executor runs the calls, and whether this process claims async runs. */
  executors: Executors;
  deliveries: ServerDeliveries;
  logs: RunLogWriter;
}

/** Makes the run change feed and the run service (its dispatcher starts with it when `executors.dispatch`). */
export function wireRuns(config: Config, options: RunsOptions): { runs: RunService; runChanges: RunChangeFeed } {
  const { store, logger, executors, deliveries } = options;
  const runChanges = createRunChangeFeed({ notifier: store.notifier, logger });
  const runs = createRunService({
    db: store.db,
    secrets: options.secrets,
    logger,
    config: {
      resultTtlMs: config.resultTtlMs,
      runRetentionMs: config.runRetentionMs,
      runLeaseMs: config.runLeaseMs,
      webhookAllowPrivate: config.webhookAllowPrivate,
      resultLimitBytes: config.resultLimitBytes,
    },
    executor: executors.calls,
    dispatch: executors.dispatch,
    metrics: options.metrics,
    owner: options.owner,
    storeOutage: options.outage,
    ownersDir: runOwnersDir(config.dataDir, { sharedStore: store.shared }),
    notifier: store.notifier,
    now: store.clock.now,
    onDeliveries: deliveries.added,
    deliveryHandOff: deliveries.worker?.handOff,
    onChange: runChanges.publish,
    changesWanted: runChanges.watches,
    logs: options.logs,
  });
  return { runs, runChanges };
}
