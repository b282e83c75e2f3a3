/**
 * Making the active deployments servable on this host (see _local_apps.ts): materialised at once, or,
 * on a host of a cluster, served from the `runplane.toml` its build recorded and built only when a
 * replica of it is to start here (one build shared by every replica's start).
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { DeployedApp } from "../runtime/mod.ts";
import type { Database } from "../store/mod.ts";
import { keyOf } from "./_local_served.ts";
import { type BuildSettings, DeploymentBuildError, materialise, plannedPaths } from "./_materialise.ts";
import type { DeploymentRow } from "./_records.ts";

/** Options of `LocalBuilds`. */
export interface LocalBuildsOptions {
  db: Kysely<Database>;
  logger: Logger;
  settings: BuildSettings;
}

/** The deployments materialised here, those that cannot be, and the deferred builds begun here. */
export class LocalBuilds {
  readonly #options: LocalBuildsOptions;
  // A deployment that cannot be built here is not retried at every poll (a store fault is).
  readonly #failed = new Set<string>();
  // Builds of deferred deployments begun here, by deployment id: every replica's start shares one.
  readonly #builds = new Map<string, Promise<void>>();

  constructor(options: LocalBuildsOptions) {
    this.#options = options;
  }

  /** Whether the deployment cannot be built here (it is not tried again). */
  failed(deploymentId: string): boolean {
    return this.#failed.has(deploymentId);
  }

  /** Forgets the deferred build of a deployment no longer served here. */
  forget(deploymentId: string): void {
    this.#builds.delete(deploymentId);
  }

  /**
   * `row` as this host serves it: with `defer` (a host of a cluster) built only when a replica is to start
   * here, unless it runs in an image (pulled at once: its root is where its replicas' jail is made).
   */
  served(row: DeploymentRow, options: { defer: boolean }): Promise<DeployedApp | undefined> {
    if (options.defer && row.config_toml !== null) {
      const app = this.deferredApp(row, row.config_toml);
      if (app !== "now") return Promise.resolve(app);
    }
    return this.materialiseHere(row);
  }

  /** `row` materialised here; undefined (logged) when it cannot be. */
  async materialiseHere(row: DeploymentRow): Promise<DeployedApp | undefined> {
    const { logger } = this.#options;
    try {
      const done = await materialise(this.#options.db, row, {
        ...this.#options.settings,
        log: (line) => logger.debug({ deployment_id: row.deployment_id, stream: line.stream }, line.text),
      });
      return {
        projectId: row.project_id,
        name: row.app_id,
        dir: done.dir,
        version: row.deployment_id,
        python: done.python,
        configToml: done.configToml,
        ...(done.image
          ? {
            image: {
              root: done.image.root,
              env: done.image.env,
              ...(done.image.process ? { process: done.image.process } : {}),
            },
          }
          : {}),
      };
    } catch (error) {
      const buildFailed = error instanceof DeploymentBuildError;
      if (buildFailed) this.#failed.add(row.deployment_id);
      const reason = buildFailed ? error.message : String(error);
      logger.error(
        { deployment_id: row.deployment_id, app: keyOf(row), reason, retried: !buildFailed },
        "the active deployment cannot be built here",
      );
      return undefined;
    }
  }

  /**
   * `row` served from its recorded `runplane.toml`, built when a replica starts; undefined when it cannot be,
   * `now` when it must be built at once (it runs in an image).
   */
  deferredApp(row: DeploymentRow, configToml: string): DeployedApp | "now" | undefined {
    let paths;
    try {
      paths = plannedPaths(row, { configToml, settings: this.#options.settings });
    } catch (error) {
      this.#failed.add(row.deployment_id);
      this.#options.logger.error(
        { deployment_id: row.deployment_id, app: keyOf(row), reason: String(error) },
        "cannot be served",
      );
      return undefined;
    }
    if (paths.image) return "now";
    return {
      projectId: row.project_id,
      name: row.app_id,
      dir: paths.dir,
      version: row.deployment_id,
      python: paths.python,
      configToml,
      deferred: { prepare: () => this.#buildDeferred(row, paths.python) },
    };
  }

  #buildDeferred(row: DeploymentRow, python: string | undefined): Promise<void> {
    const { logger } = this.#options;
    const known = this.#builds.get(row.deployment_id);
    if (known) return known;
    logger.info({ deployment_id: row.deployment_id, app: keyOf(row) }, "building the deployment to run a replica here");
    const build = materialise(this.#options.db, row, {
      ...this.#options.settings,
      log: (line) => logger.debug({ deployment_id: row.deployment_id, stream: line.stream }, line.text),
    }).then((done) => {
      // The replicas were told where the interpreter would be before the build; it must be there.
      if (done.python !== python) {
        throw new DeploymentBuildError(`its build made interpreter ${done.python}, not the planned ${python}`);
      }
    }).catch((error) => {
      // A build that cannot succeed fails every start; a store fault is tried again by the next one.
      if (!(error instanceof DeploymentBuildError)) this.#builds.delete(row.deployment_id);
      logger.error({ deployment_id: row.deployment_id, app: keyOf(row), reason: String(error) }, "build failed here");
      throw new Error(`the deployment ${row.deployment_id} cannot be built on this host: ${error.message ?? error}`);
    });
    this.#builds.set(row.deployment_id, build);
    return build;
  }
}
