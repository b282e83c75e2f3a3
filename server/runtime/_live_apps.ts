/**
 * The apps a runtime serves, by `project/app`: each loaded version (of the apps folder, deployed, or
 * unserved) with its project's secrets and its pool, admitted or refused, re-read one reload at a time
 * (and polled), and the pools of retired versions still finishing calls and of staged ones.
 */
import type { AppConfig } from "./_app_config.ts";
import { type AppVersion, loadApp, loadDeployedApp, scanApps, unservedVersion } from "./_app_registry.ts";
import { createPool, label, type PoolOptions } from "./_app_pool.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import type { CallableReplica } from "./_replica.ts";
import type { ReplicaPool } from "./_replica_pool.ts";
import { StagedPools } from "./_staged_pools.ts";
import type { ProjectEnvironment } from "./_types.ts";

/** A project without secrets (or a runtime without `projectEnvironment`). */
export const NO_SECRETS: ProjectEnvironment = { env: {}, fingerprint: "" };

/** One app as served now: its version (or refusal), the secrets it was started with and its pool. */
export interface LiveApp {
  version: AppVersion;
  secrets: ProjectEnvironment;
  pool?: ReplicaPool<CallableReplica>;
  /** The loaded version, when `version` is its refusal (see `admissionProblem`): checked again at each reload. */
  refused?: AppVersion;
}

/** An app that loaded, with its pool: what a call may run on. */
export type ServedApp = LiveApp & {
  pool: ReplicaPool<CallableReplica>;
  version: { config: NonNullable<AppVersion["config"]> };
};

/** The apps of a runtime over an apps folder and the deployed apps, and their pools. */
export class LiveApps {
  /** The runtime's options, its parts made. */
  readonly options: PoolOptions;
  readonly apps = new Map<string, LiveApp>();
  /** Pools of versions replaced or removed, until their replicas are gone. */
  readonly retired = new Set<ReplicaPool<CallableReplica>>();
  readonly staged = new StagedPools<CallableReplica>();
  readonly allowExternalRuntimes: boolean;
  closed = false;
  readonly #appsDir: string;
  readonly #replicaLimit: number;
  readonly #logger: Logger;
  #timer: ReturnType<typeof setInterval> | undefined;
  #polling: Promise<void> | undefined;
  // Reloads run one at a time: two at once could finish out of order, and the one that read the
  // deployed apps first would then install the version the other had just replaced.
  #reloadTail: Promise<void> = Promise.resolve();
  #reloadQueued: Promise<void> | undefined;

  constructor(appsDir: string, options: PoolOptions) {
    this.#appsDir = appsDir;
    this.options = options;
    this.#replicaLimit = options.projectReplicaLimit ?? Infinity;
    this.#logger = options.logger;
    this.allowExternalRuntimes = options.externalRuntimes?.allowed ?? false;
  }

  /** Loads every app and starts polling. */
  async start(): Promise<void> {
    await this.reload();
    this.#timer = setInterval(() => {
      this.#polling ??= this.reload().catch((error) => this.#logger.error({ err: error }, "reloading apps failed"))
        .finally(
          () => (this.#polling = undefined),
        );
    }, this.options.pollIntervalMs ?? 500);
    this.#timer.unref();
  }

  /** Each project's secrets, read once per reload. */
  secretsReader(): (projectId: string) => Promise<ProjectEnvironment> {
    const read = new Map<string, Promise<ProjectEnvironment>>();
    return (projectId) => {
      let found = read.get(projectId);
      if (!found) {
        found = this.options.projectEnvironment?.(projectId) ?? Promise.resolve(NO_SECRETS);
        read.set(projectId, found);
      }
      return found;
    };
  }

  /** See `Runtime.admissionProblem`. */
  admissionProblem(projectId: string, app: string, config: AppConfig): string | undefined {
    const { options } = this;
    const replicaLimit = this.#replicaLimit;
    // Seated, an app whose replicas can never fit this host is still served here: its calls go to hosts
    // where they fit (`canPlace` is false here).
    if (config.custom?.kind !== "url" && !options.seated) {
      const never = options.budget.neverFits(config.hardware);
      if (never) return `${never}: no replica of it could ever start here; lower it`;
      const { gpuCount: count, compute } = config.hardware;
      const noGpus = options.budget.gpus.neverFits({ count, compute: compute === "CPU" ? undefined : compute });
      if (noGpus) return noGpus;
    }
    let asked = config.maxReplicas;
    for (const live of this.apps.values()) {
      const { version } = live;
      if (version.projectId === projectId && version.name !== app && version.config) {
        asked += version.config.maxReplicas;
      }
    }
    if (asked <= replicaLimit) return undefined;
    return `project ${projectId}'s apps would ask for ${asked} replicas in all (scaling.max_replicas summed over its apps), more than this server's RUNPLANE_PROJECT_REPLICA_LIMIT of ${replicaLimit}; lower max_replicas, or remove an app`;
  }

  /** `version`, or its refusal when it may not be served here (see `admissionProblem`). */
  admitted(version: AppVersion): { version: AppVersion; refused?: AppVersion } {
    if (!version.config) return { version };
    const problem = this.admissionProblem(version.projectId, version.name, version.config);
    if (!problem) return { version };
    const { config: _, ...base } = version;
    return { version: { ...base, error: problem }, refused: version };
  }

  /** Serves `loaded` (or its refusal) with `secrets`: a staged pool of it, else a new one. */
  install(loaded: AppVersion, secrets: ProjectEnvironment): LiveApp {
    const { options } = this;
    const logger = this.#logger;
    const { version, refused } = this.admitted(loaded);
    if (version.error) logger.error({ app: label(version), error: version.error }, "app failed to load");
    else logger.info({ app: label(version), runtime: version.config?.runtime }, "app loaded");
    // A version `stage` started is served by what it started (a warm replica, its template).
    const taken = this.staged.take({ version, secrets: secrets.fingerprint });
    if (taken && options.seated) taken.setLimits(options.seats.limits(label(version), version.config!.minReplicas));
    const pool = this.closed ? undefined : (taken ?? createPool(version, secrets, options));
    const live = { version, secrets, refused, pool };
    this.apps.set(label(version), live);
    return live;
  }

  /** Whether `live` is still what `version` with `secrets` gives (a refusal only while it is still refused). */
  #unchanged(live: LiveApp | undefined, version: AppVersion, secrets: ProjectEnvironment): boolean {
    if (live?.version.fingerprint !== version.fingerprint || live.secrets.fingerprint !== secrets.fingerprint) {
      return false;
    }
    if (!live.refused) return true;
    return this.admitted(version).version.error === live.version.error;
  }

  #retire(live: LiveApp): void {
    if (!live.pool) return;
    live.pool.drain();
    this.retired.add(live.pool);
  }

  /** See `Runtime.reload`. */
  reload(): Promise<void> {
    // A reload not yet begun reads after this call: share it; else queue one after the current one.
    if (this.#reloadQueued) return this.#reloadQueued;
    const round = this.#reloadTail.catch(() => {}).then(() => {
      this.#reloadQueued = undefined;
      return this.#reloadOnce();
    });
    this.#reloadQueued = round;
    this.#reloadTail = round;
    return round;
  }

  async #reloadOnce(): Promise<void> {
    const { apps, options, retired } = this;
    const logger = this.#logger;
    const allowExternalRuntimes = this.allowExternalRuntimes;
    // Unchanged folders (by name, size and time of their files) are not read again.
    // The version as loaded (a refused one's own, not its refusal), so that it is checked again.
    const loaded = (key: string) => apps.get(key)?.refused ?? apps.get(key)?.version;
    const found = await scanApps(this.#appsDir, (projectId, name) => loaded(`${projectId}/${name}`));
    const inFolder = new Set(found.map(label));
    for (const deployed of options.deployedApps?.() ?? []) {
      const key = `${deployed.projectId}/${deployed.name}`;
      if (!inFolder.has(key)) {
        found.push(await loadDeployedApp(deployed, { known: loaded(key), allowExternalRuntimes }));
      }
    }
    const listed = new Set(found.map(label));
    for (const unserved of options.unservedApps?.() ?? []) {
      if (!listed.has(`${unserved.projectId}/${unserved.name}`)) found.push(unservedVersion(unserved));
    }
    const secretsOf = this.secretsReader();
    const secrets = await Promise.all(found.map((version) => secretsOf(version.projectId)));
    if (this.closed) return;
    const seen = new Set(found.map(label));
    // Removed apps first: what they asked for no longer counts against their project's limit.
    for (const [key, live] of apps) {
      if (seen.has(key)) continue;
      logger.info({ app: key }, "app removed");
      apps.delete(key);
      this.#retire(live);
    }
    for (const [index, version] of found.entries()) {
      const key = label(version);
      const live = apps.get(key);
      if (this.#unchanged(live, version, secrets[index])) continue;
      if (live) {
        logger.info({ app: key }, "app changed; new calls go to new replicas");
        this.#retire(live);
        // Its own old version does not count against its project's limit.
        apps.delete(key);
      }
      this.install(version, secrets[index]);
    }
    for (const pool of retired) {
      if (pool.capacity().replicas === 0 && pool.capacity().busy === 0) {
        pool.detach();
        retired.delete(pool);
      }
    }
  }

  /** The app as served; throws 404 when there is none, 503 when it failed to load (or the runtime closes). */
  live(projectId: string, app: string): ServedApp {
    const found = this.apps.get(`${projectId}/${app}`);
    if (!found) {
      throw new ProblemError(
        "not-found",
        `Project ${projectId} has no app named ${app}; check the name or deploy the app first`,
      );
    }
    if (found.version.error !== undefined || !found.pool) {
      throw new ProblemError(
        "app-unavailable",
        `App ${projectId}/${app} failed to load: ${found.version.error ?? "the server is closing"}`,
      );
    }
    return found as ServedApp;
  }

  /** Every pool with replicas that may still run: current versions' and retired ones'. */
  livePools(): ReplicaPool<CallableReplica>[] {
    return [...[...this.apps.values()].flatMap((a) => (a.pool ? [a.pool] : [])), ...this.retired];
  }

  /** Like `live`, but first loads an app deployed since the last poll. */
  async liveOrLoad(projectId: string, app: string): Promise<ServedApp> {
    const { apps, options } = this;
    const allowExternalRuntimes = this.allowExternalRuntimes;
    // An app deployed since the last poll is served at once.
    if (!apps.has(`${projectId}/${app}`) && !this.closed) {
      const named = (d: { projectId: string; name: string }) => d.projectId === projectId && d.name === app;
      const deployed = options.deployedApps?.().find(named);
      const unserved = deployed ? undefined : options.unservedApps?.().find(named);
      const version = (await loadApp(this.#appsDir, projectId, app))
        ?? (deployed ? await loadDeployedApp(deployed, { allowExternalRuntimes }) : undefined)
        ?? (unserved ? unservedVersion(unserved) : undefined);
      const secrets = version ? await this.secretsReader()(projectId) : NO_SECRETS;
      if (version && !apps.has(label(version))) this.install(version, secrets);
    }
    return this.live(projectId, app);
  }

  /** Stops polling and stops every replica. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.#timer);
    await this.#polling;
    const pools = [...this.livePools(), ...this.staged.drain()];
    this.apps.clear();
    this.retired.clear();
    await Promise.all(pools.map((pool) => pool.close()));
  }
}
