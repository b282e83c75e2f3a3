/**
 * What builds and serves deployments in this process, once the service is started: the build worker, the
 * follower of the store's active deployments (`startLocalApps`) and the reporter of what this process
 * serves (`served_by`); and the wake-up that tells every process a deployment changed.
 */
import { hostname } from "node:os";
import type { DeployedApp, UnservedApp } from "../runtime/mod.ts";
import { type Builder, startBuilder } from "./_builder.ts";
import { type ImageCache, startImageCache } from "./_image_cache.ts";
import { type LocalApps, startLocalApps } from "./_local_apps.ts";
import { type ServedReporter, startServedReporter } from "./_served_reporter.ts";
import type { DeploymentsOptions } from "./_types.ts";
import { sweepUnpacked } from "./_unpacked.ts";

/** What the parts of the deployments service share: its options and what builds and serves here. */
export interface DeploymentsContext {
  options: DeploymentsOptions;
  serving: Serving;
}

/** The build worker, the follower of active deployments and the `served_by` reporter of this process. */
export class Serving {
  readonly #options: DeploymentsOptions;
  #builder: Builder | undefined;
  #localApps: LocalApps | undefined;
  #reporter: ServedReporter | undefined;
  #imageCache: ImageCache | undefined;

  constructor(options: DeploymentsOptions) {
    this.#options = options;
  }

  /** Wakes every process's builder and follower of active deployments (they poll when this fails). */
  async announce(): Promise<void> {
    await this.#options.notifier.notify("runplane_deployments").catch((error) =>
      this.#options.logger.warn({ err: error }, "announcing a deployment failed; other processes poll for it")
    );
  }

  /** Wakes this process's builder (a deployment was queued); nothing before `start`. */
  wakeBuilder(): void {
    this.#builder?.wake();
  }

  /** Re-reads the active deployments (see `LocalApps.sync`); nothing before `start`. */
  async sync(): Promise<void> {
    await this.#localApps?.sync();
  }

  /** The deployed apps ready on this host. */
  list(): DeployedApp[] {
    return this.#localApps?.list() ?? [];
  }

  /** The deployed apps no deployment serves. */
  unserved(): UnservedApp[] {
    return this.#localApps?.unserved() ?? [];
  }

  /** Starts the reporter, the follower and the build worker; resolves after the first read. */
  async start(): Promise<void> {
    const options = this.#options;
    const { db, logger, settings } = options;
    // What an earlier process kept for its builds: a build here unpacks from the store instead.
    await sweepUnpacked(settings.dataDir, { olderThanMs: 0, now: Date.now() });
    const served = options.followOnly ? undefined : startServedReporter({
      db,
      logger,
      processId: options.owner,
      host: options.host ?? hostname(),
      now: options.now,
    });
    this.#reporter = served;
    const localApps = startLocalApps({
      db,
      notifier: options.notifier,
      logger,
      settings,
      now: options.now,
      onChange: () => options.runtime.reload(),
      onServed: async (apps) => await served?.report(apps),
      pollMs: options.pollMs,
      deferBuilds: options.deferBuilds || options.followOnly,
      testDelayMs: options.testDelayLocalSyncMs,
      stage: (app, staging) => options.runtime.stage(app, staging),
    });
    this.#localApps = localApps;
    if (options.followOnly) return await localApps.sync();
    this.#builder = startBuilder({
      db,
      notifier: options.notifier,
      logger,
      owner: options.owner,
      now: options.now,
      settings,
      pollMs: options.pollMs,
      serve: async (deployment, serving) => await this.#localApps?.adopt(deployment, serving),
      rejected: async (deployment, error) => await this.#localApps?.reject(deployment, error),
      settled: async (deployment) => {
        await this.#localApps?.settle(deployment);
        void this.#imageCache?.prune();
      },
    });
    await localApps.sync();
    this.#imageCache = this.#startImageCache(localApps);
    void this.#imageCache?.prune();
  }

  /** The bounded cache of image roots and system layers (the builder's process only: it owns the store). */
  #startImageCache(localApps: LocalApps): ImageCache | undefined {
    const { settings, imageCache, logger } = this.#options;
    if (!settings.images || !imageCache) return undefined;
    return startImageCache({
      images: settings.images,
      dataDir: settings.dataDir,
      ...imageCache,
      logger,
      inUse: () => localApps.list().flatMap((app) => app.image ? [app.image.root] : []),
    });
  }

  async stop(): Promise<void> {
    await this.#builder?.stop();
    await this.#imageCache?.idle();
    await this.#localApps?.stop();
    // After the follower: nothing reports after this, and this process's rows go.
    await this.#reporter?.stop();
  }
}
