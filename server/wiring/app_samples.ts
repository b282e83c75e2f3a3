/** The apps' sampler (an app's charts: replicas and starts over time), started with the server's lifecycle. */
import { randomUUID } from "node:crypto";
import type { Logger } from "../log.ts";
import { startAppSampler } from "../runs/mod.ts";
import type { Runtime } from "../runtime/mod.ts";
import type { Store } from "../store/mod.ts";

/** What `sampleApps` reads and writes. */
export interface SampleAppsParts {
  store: Store;
  /**
   * This process's own runtime (not a worker's view of its supervisor's): a worker's runs no replica,
   * so a worker writes no sample and a host's replicas are counted once, by its supervisor.
   */
  runtime: Runtime;
  logger: Logger;
}

/** Starts sampling the apps' replicas into the store, as a host of its own (a new id per process). */
export function sampleApps(parts: SampleAppsParts): { stop(): Promise<void> } {
  const { store, runtime, logger } = parts;
  return startAppSampler(store.db, runtime, { hostId: randomUUID(), clock: store.clock.now, logger });
}
