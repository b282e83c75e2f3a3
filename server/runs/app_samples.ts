/**
 * The hosts' samples of their apps, for an app's charts (issue 51): every few seconds a host folds into
 * the store, per app and minute, the most replicas it ran at once and the replicas it started since the
 * last sample (from a count that only grows while a pool lives). Only a process that runs replicas (a
 * lone server or a host's supervisor) samples; a worker's replicas are its supervisor's.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { upsertAppSample } from "../store/statements/app_insights.ts";
import { startTicker, type Ticker } from "../ticker/mod.ts";

/** What the sampler reads of the host's replicas. */
export interface SampledReplicas {
  /** Per app (`project/app`): replicas starting, idle and busy. */
  replicaStates(): Array<{ app: string; starting: number; idle: number; busy: number }>;
  /** Per app: replicas started, a count that grows. */
  replicaStarts(): Array<{ app: string; starts: number }>;
}

/** Options of `startAppSampler`. */
export interface AppSamplerOptions {
  /** This host (a row per host and minute). */
  hostId: string;
  /** The store's clock (Unix ms). */
  clock: () => number;
  logger: Logger;
  /** How often to sample (default 5 s). */
  intervalMs?: number;
}

function splitLabel(label: string): { projectId: string; appId: string } | null {
  const slash = label.indexOf("/");
  return slash > 0 ? { projectId: label.slice(0, slash), appId: label.slice(slash + 1) } : null;
}

/** Samples `replicas` into the store every `intervalMs` until stopped. */
export function startAppSampler(db: Kysely<Database>, replicas: SampledReplicas, options: AppSamplerOptions): Ticker {
  const counted = new Map<string, number>();
  async function sample(): Promise<void> {
    const minute = Math.floor(options.clock() / 60_000) * 60_000;
    const alive = new Map(replicas.replicaStates().map((s) => [s.app, s.starting + s.idle + s.busy]));
    const starts = new Map<string, number>();
    for (const { app, starts: total } of replicas.replicaStarts()) {
      // A count that fell is a retired version's pool gone: its starts were counted already.
      starts.set(app, Math.max(0, total - (counted.get(app) ?? 0)));
      counted.set(app, total);
    }
    for (const app of counted.keys()) if (!starts.has(app)) counted.delete(app);
    for (const app of new Set([...alive.keys(), ...starts.keys()])) {
      const ref = splitLabel(app);
      const replicaCount = alive.get(app) ?? 0;
      const started = starts.get(app) ?? 0;
      if (!ref || (replicaCount === 0 && started === 0)) continue;
      await upsertAppSample(db, { ...ref, hostId: options.hostId, minute, replicas: replicaCount, starts: started });
    }
  }
  return startTicker(sample, {
    intervalMs: options.intervalMs ?? 5_000,
    onError: (error) => options.logger.warn({ err: error }, "sampling the apps' replicas failed"),
  });
}
