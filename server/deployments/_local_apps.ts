/**
 * The deployments this process serves: the active deployment of every app in the store, materialised
 * on this host. Re-read on every wake-up (`runplane_deployments`) and polled, so that every process of
 * a scaled-out deployment switches to a new active deployment within a poll.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { DeployedApp } from "../runtime/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import { type BuildSettings, DeploymentBuildError, materialise } from "./_materialise.ts";
import { type DeploymentRow, selectActiveDeployments } from "./_records.ts";

/** Options of `startLocalApps`. */
export interface LocalAppsOptions {
  db: Kysely<Database>;
  notifier: Notifier;
  logger: Logger;
  settings: BuildSettings;
  /** Called after the set of served deployments changed (the runtime reloads). */
  onChange(): Promise<void>;
  pollMs?: number;
}

/** The deployments served here. */
export interface LocalApps {
  /** Every deployed app ready on this host. */
  list(): DeployedApp[];
  /** Re-reads the store now; resolves once what it found is served. */
  sync(): Promise<void>;
  /**
   * Serves `row` here before the store says it is active (the builder's host, so that "ready" means
   * served); what the store says is kept from this app until `settle` is called for it.
   */
  adopt(row: DeploymentRow): Promise<void>;
  /** Ends an `adopt`: the store decides again (a build whose end was not recorded goes back). */
  settle(row: DeploymentRow): Promise<void>;
  stop(): Promise<void>;
}

/** Starts following the store's active deployments. */
export function startLocalApps(options: LocalAppsOptions): LocalApps {
  const { logger } = options;
  const served = new Map<string, DeployedApp>();
  // A deployment that failed to materialise here is not retried at every poll.
  const failed = new Set<string>();
  /** Apps adopted by a build of this process, by `project/app`: the store's older answer does not undo them. */
  const adopted = new Map<string, string>();
  let syncing: Promise<void> | undefined;
  let again = false;
  let stopped = false;

  async function materialiseHere(row: DeploymentRow): Promise<DeployedApp | undefined> {
    const app = `${row.project_id}/${row.app_id}`;
    try {
      const done = await materialise(options.db, row, {
        ...options.settings,
        log: (line) => logger.debug({ deployment_id: row.deployment_id, stream: line.stream }, line.text),
      });
      return {
        projectId: row.project_id,
        name: row.app_id,
        dir: done.dir,
        version: row.deployment_id,
        python: done.python,
      };
    } catch (error) {
      failed.add(row.deployment_id);
      const reason = error instanceof DeploymentBuildError ? error.message : String(error);
      logger.error({ deployment_id: row.deployment_id, app, reason }, "the active deployment cannot be built here");
      return undefined;
    }
  }

  async function syncOnce(): Promise<void> {
    const rows = await selectActiveDeployments(options.db);
    const wanted = new Map(rows.map((row) => [`${row.project_id}/${row.app_id}`, row]));
    let changed = false;
    for (const [key, row] of wanted) {
      if (stopped) return;
      if (adopted.has(key) || served.get(key)?.version === row.deployment_id || failed.has(row.deployment_id)) {
        continue;
      }
      const app = await materialiseHere(row);
      if (!app) continue;
      served.set(key, app);
      changed = true;
    }
    for (const key of [...served.keys()]) {
      if (wanted.has(key) || adopted.has(key)) continue;
      served.delete(key);
      changed = true;
    }
    if (changed && !stopped) await options.onChange();
  }

  function sync(): Promise<void> {
    if (syncing) {
      again = true;
      return syncing;
    }
    syncing = (async () => {
      do {
        again = false;
        await syncOnce().catch((error) => logger.error({ err: error }, "reading the active deployments failed"));
      } while (again && !stopped);
    })().finally(() => (syncing = undefined));
    return syncing;
  }

  const unlisten = options.notifier.listen("runplane_deployments", () => void sync());
  const timer = setInterval(() => void sync(), options.pollMs ?? 2000);
  timer.unref();

  return {
    list: () => [...served.values()],
    sync,
    async adopt(row) {
      const key = `${row.project_id}/${row.app_id}`;
      adopted.set(key, row.deployment_id);
      const app = await materialiseHere(row);
      if (!app || stopped) return;
      served.set(key, app);
      await options.onChange();
    },
    async settle(row) {
      const key = `${row.project_id}/${row.app_id}`;
      if (adopted.get(key) === row.deployment_id) adopted.delete(key);
      await sync();
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      unlisten();
      await syncing;
    },
  };
}
