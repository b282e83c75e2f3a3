/**
 * The deployments this process serves: the active deployment of every app in the store, materialised
 * on this host. Re-read on every wake-up (`runplane_deployments`) and polled, so that every process of
 * a scaled-out deployment switches to a new active deployment within a poll even when a wake-up is lost.
 *
 * A host of a cluster (`deferBuilds`) builds a deployment only when one of its replicas is to start here:
 * until then it serves the app from the `runplane.toml` the build recorded in the store (its limits,
 * concurrency and hardware are all routing needs), and each replica's start awaits the one shared build.
 *
 * The building process serves its build before the store says it is active (`adopt`), and the store's
 * answer is ignored for that app until a read that began after the build's end was recorded (`settle`):
 * a read that began before it, still in flight, would switch a "ready" deployment back to the old one.
 * It serves the build only once the runtime started it and it serves (`stage`: main.py imported, or the
 * custom server answered); a build that does not is failed with why, and the previous one goes on.
 *
 * An app whose builds failed and none is active is followed too (`unserved`): its calls get 503 naming
 * the failed deployment, not 404. The builder says so before the failure is recorded (`reject`).
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { DeployedApp, StagedVersion, UnservedApp } from "../runtime/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import { LocalBuilds } from "./_local_builds.ts";
import { scanStore } from "./_local_scan.ts";
import { keyOf, LocalServed } from "./_local_served.ts";
import { type AdoptOptions, stageApp } from "./_local_staging.ts";
import { SyncRounds, watchStore } from "./_local_watch.ts";
import type { BuildSettings } from "./_materialise.ts";
import type { DeploymentRow } from "./_records.ts";
import type { ServedApp } from "./_served_reporter.ts";

export type { AdoptOptions } from "./_local_staging.ts";

/** Options of `startLocalApps`. */
export interface LocalAppsOptions {
  db: Kysely<Database>;
  notifier: Notifier;
  logger: Logger;
  settings: BuildSettings;
  /** The store's clock (when a deployment began to be served here). */
  now(): number;
  /** Called after the set of served deployments changed (the runtime reloads). */
  onChange(): Promise<void>;
  /** Called after `onChange` with everything served here (recorded in the store for `getApp`). */
  onServed?(apps: ServedApp[]): Promise<void>;
  pollMs?: number;
  /**
   * A host of a cluster: an active deployment whose build recorded its `runplane.toml` is served from
   * that file, and built here only when a replica of it is to start here (then kept and reused).
   */
  deferBuilds?: boolean;
  /** Test only (RUNPLANE_TEST_DELAY_LOCAL_SYNC): a pause between reading the store and acting on it. */
  testDelayMs?: number;
  /**
   * Starts a deployment built here and resolves once it serves (the runtime's `stage`): `adopt` serves it
   * only then. Without it, `adopt` serves what it materialised.
   */
  stage?(app: DeployedApp, options: { signal?: AbortSignal }): Promise<StagedVersion>;
}

/** The deployments served here. */
export interface LocalApps {
  /** Every deployed app ready on this host. */
  list(): DeployedApp[];
  /** Every deployed app that no deployment serves (its newest build failed, and none of it is active). */
  unserved(): UnservedApp[];
  /** Re-reads the store; resolves once a read that began after this call is served. */
  sync(): Promise<void>;
  /**
   * Serves `row` here before the store says it is active (the builder's host, so that "ready" means
   * served); what the store says is kept from this app until `settle` is called for it. Throws (a
   * `DeploymentBuildError` when it does not load, its traceback written to `log`) when it cannot be served.
   */
  adopt(row: DeploymentRow, options: AdoptOptions): Promise<void>;
  /**
   * Before `row`'s failure (`error`) is recorded: an app that nothing serves here answers 503 naming it
   * from now on; what the store says is kept from this app until `settle` is called for it.
   */
  reject(row: DeploymentRow, error: string): Promise<void>;
  /** Ends an `adopt`: the store decides again (a build whose end was not recorded goes back). */
  settle(row: DeploymentRow): Promise<void>;
  stop(): Promise<void>;
}

/** Starts following the store's active deployments. */
export function startLocalApps(options: LocalAppsOptions): LocalApps {
  const local = new LocalServed(options);
  const builds = new LocalBuilds(options);
  const rounds = new SyncRounds({
    logger: options.logger,
    round: () =>
      scanStore(local, {
        db: options.db,
        builds,
        now: () => options.now(),
        deferBuilds: options.deferBuilds,
        testDelayMs: options.testDelayMs,
      }),
    stopped: () => local.stopped,
  });
  const sync = () => rounds.sync();
  const unwatch = watchStore(options.notifier, { pollMs: options.pollMs, sync });

  return {
    list: () => [...local.served.values()].map(({ app }) => app),
    unserved: () => [...local.unserved.values()],
    sync,
    async adopt(row, adoptOptions) {
      const key = keyOf(row);
      local.pins.set(key, { deploymentId: row.deployment_id });
      const app = await builds.materialiseHere(row);
      if (!app) throw new Error(`Deployment ${row.deployment_id} was built but cannot be served here`);
      const staged = await stageApp(app, {
        ...adoptOptions,
        stage: options.stage?.bind(options),
        serving: () => local.served.has(`${app.projectId}/${app.name}`),
      });
      if (!local.stopped) {
        local.served.set(key, { app, since: options.now() });
        local.unserved.delete(key);
        await local.reload();
      }
      // Served now (the runtime took its replicas over), or stopping: what is left of it stops.
      await staged?.release();
    },
    async reject(row, error) {
      const key = keyOf(row);
      local.pins.set(key, { deploymentId: row.deployment_id });
      if (local.served.has(key) || local.stopped) return;
      local.unserved.set(key, { projectId: row.project_id, name: row.app_id, deploymentId: row.deployment_id, error });
      await local.reload();
    },
    async settle(row) {
      const key = keyOf(row);
      const pin = local.pins.get(key);
      if (!pin || pin.deploymentId !== row.deployment_id) return await sync();
      pin.releasedAfterRead = local.reads;
      await sync();
      if (local.pins.get(key) === pin) local.pins.delete(key);
    },
    async stop() {
      local.stopped = true;
      unwatch();
      await rounds.ended();
    },
  };
}
