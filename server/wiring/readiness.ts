/** `/readyz`'s reasons: what keeps this process from taking calls, if anything. */
import type { Readiness } from "../context.ts";
import type { WorkerRole } from "../host/mod.ts";
import type { DrainGate } from "../http/mod.ts";
import { migrationsApplied, type Store, type StoreOutage, writeProbe } from "../store/mod.ts";

/** What `createReadiness` looks at. */
export interface ReadinessSources {
  gate: DrainGate;
  store: Store;
  outage: StoreOutage;
  /** This process's lease owner id: the write probe writes as it. */
  owner: string;
  /** Whether every app's `min_replicas` have warmed up (the apps have loaded). */
  appsLoaded(): boolean;
  /** On a worker: its supervisor must still be there. */
  worker?: WorkerRole;
}

/** Ready when not draining, the apps loaded, the supervisor (a worker's) there, and the store migrated and writable. */
export function createReadiness(sources: ReadinessSources): Readiness {
  const { gate, store, outage, owner, worker } = sources;
  return {
    async reasons() {
      const reasons: string[] = [];
      if (gate.draining) reasons.push("the server is draining");
      if (!sources.appsLoaded()) reasons.push("apps are loading (min_replicas warming up)");
      if (worker && !worker.connected()) reasons.push("the host's supervisor is gone");
      try {
        if (!(await migrationsApplied(store.db))) reasons.push("store migrations are not applied");
        // A read works on a full disk: only a write tells that the store takes runs.
        if (!outage.active) await writeProbe(store.db, owner, store.clock.now());
      } catch (error) {
        if (!outage.refused(error)) reasons.push(`store unreachable: ${(error as Error).message}`);
      }
      if (outage.active) reasons.push(`the store cannot write (${outage.reason})`);
      return reasons;
    },
  };
}
