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
import { setTimeout as sleep } from "node:timers/promises";
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import { AppStartError, type DeployedApp, type StagedVersion, type UnservedApp } from "../runtime/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import type { BuildLogLine } from "./_build_log.ts";
import { type BuildSettings, DeploymentBuildError, materialise, plannedPaths } from "./_materialise.ts";
import { type DeploymentRow, selectActiveDeployments, selectUnservedApps } from "./_records.ts";
import type { ServedApp } from "./_served_reporter.ts";

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

/** Options of `LocalApps.adopt`. */
export interface AdoptOptions {
  /** The build's log: what the app said when it did not load goes there. */
  log(line: BuildLogLine): void;
  /** Stops the replica started for the check (the server is stopping). */
  signal?: AbortSignal;
}

/** An adopted app: the store's answers are ignored for it, up to the read numbered `releasedAfterRead`. */
interface Pin {
  deploymentId: string;
  releasedAfterRead?: number;
}

function keyOf(row: DeploymentRow): string {
  return `${row.project_id}/${row.app_id}`;
}

/** Starts following the store's active deployments. */
export function startLocalApps(options: LocalAppsOptions): LocalApps {
  const { logger } = options;
  const served = new Map<string, { app: DeployedApp; since: number }>();
  const unserved = new Map<string, UnservedApp>();
  // A deployment that cannot be built here is not retried at every poll (a store fault is).
  const failed = new Set<string>();
  const pins = new Map<string, Pin>();
  // Reads of the store are numbered as they begin; rounds run one at a time.
  let reads = 0;
  let tail: Promise<void> = Promise.resolve();
  let queued: Promise<void> | undefined;
  let stopped = false;

  function pinned(key: string, read: number): boolean {
    const pin = pins.get(key);
    return pin !== undefined && (pin.releasedAfterRead === undefined || read <= pin.releasedAfterRead);
  }

  async function materialiseHere(row: DeploymentRow): Promise<DeployedApp | undefined> {
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
        configToml: done.configToml,
      };
    } catch (error) {
      const buildFailed = error instanceof DeploymentBuildError;
      if (buildFailed) failed.add(row.deployment_id);
      const reason = buildFailed ? error.message : String(error);
      logger.error(
        { deployment_id: row.deployment_id, app: keyOf(row), reason, retried: !buildFailed },
        "the active deployment cannot be built here",
      );
      return undefined;
    }
  }

  // Builds of deferred deployments begun here, by deployment id: every replica's start shares one.
  const builds = new Map<string, Promise<void>>();

  function buildDeferred(row: DeploymentRow, python: string | undefined): Promise<void> {
    const known = builds.get(row.deployment_id);
    if (known) return known;
    logger.info({ deployment_id: row.deployment_id, app: keyOf(row) }, "building the deployment to run a replica here");
    const build = materialise(options.db, row, {
      ...options.settings,
      log: (line) => logger.debug({ deployment_id: row.deployment_id, stream: line.stream }, line.text),
    }).then((done) => {
      // The replicas were told where the interpreter would be before the build; it must be there.
      if (done.python !== python) {
        throw new DeploymentBuildError(`its build made interpreter ${done.python}, not the planned ${python}`);
      }
    }).catch((error) => {
      // A build that cannot succeed fails every start; a store fault is tried again by the next one.
      if (!(error instanceof DeploymentBuildError)) builds.delete(row.deployment_id);
      logger.error({ deployment_id: row.deployment_id, app: keyOf(row), reason: String(error) }, "build failed here");
      throw new Error(`the deployment ${row.deployment_id} cannot be built on this host: ${error.message ?? error}`);
    });
    builds.set(row.deployment_id, build);
    return build;
  }

  /** `row` served from its recorded `runplane.toml`, built when a replica starts; undefined when it cannot be. */
  function deferredApp(row: DeploymentRow, configToml: string): DeployedApp | undefined {
    let paths;
    try {
      paths = plannedPaths(row, { configToml, settings: options.settings });
    } catch (error) {
      failed.add(row.deployment_id);
      logger.error({ deployment_id: row.deployment_id, app: keyOf(row), reason: String(error) }, "cannot be served");
      return undefined;
    }
    return {
      projectId: row.project_id,
      name: row.app_id,
      dir: paths.dir,
      version: row.deployment_id,
      python: paths.python,
      configToml,
      deferred: { prepare: () => buildDeferred(row, paths.python) },
    };
  }

  async function changed(): Promise<void> {
    await options.onChange();
    const apps = [...served.values()].map(({ app, since }) => ({
      projectId: app.projectId,
      appId: app.name,
      deploymentId: app.version,
      since,
    }));
    await options.onServed?.(apps);
  }

  /** Follows the store's apps that no deployment serves; whether that changed anything. */
  function syncUnserved(rows: Awaited<ReturnType<typeof selectUnservedApps>>, read: number): boolean {
    const wanted = new Map(rows.map((row) => [`${row.project_id}/${row.app_id}`, row]));
    let change = false;
    for (const key of new Set([...wanted.keys(), ...unserved.keys()])) {
      const row = wanted.get(key);
      if (pinned(key, read) || row?.deployment_id === unserved.get(key)?.deploymentId) continue;
      if (row) {
        const error = row.error ?? "its build failed";
        unserved.set(key, { projectId: row.project_id, name: row.app_id, deploymentId: row.deployment_id, error });
      } else unserved.delete(key);
      change = true;
    }
    return change;
  }

  /** Starts `app` and resolves once it serves; a `DeploymentBuildError` with what it said when it does not. */
  async function stage(app: DeployedApp, { log, signal }: AdoptOptions): Promise<StagedVersion | undefined> {
    if (!options.stage) return undefined;
    log({
      stream: "build",
      text: "==> starting a replica: ready once main.py imported (a custom server: once it answers)",
    });
    try {
      const staged = await options.stage(app, { signal });
      log({ stream: "build", text: staged.skipped ? `==> not started: ${staged.skipped}` : "==> the replica serves" });
      return staged;
    } catch (error) {
      if (!(error instanceof AppStartError)) throw error;
      for (const line of error.output) log({ stream: "stderr", text: line });
      const serving = served.has(`${app.projectId}/${app.name}`);
      log({
        stream: "build",
        text: serving
          ? "==> the deployment serving before goes on serving"
          : "==> no deployment of this app serves: its calls get 503 app-unavailable until one is ready",
      });
      throw new DeploymentBuildError(error.message, { cause: error });
    }
  }

  async function syncOnce(): Promise<void> {
    const read = ++reads;
    const [rows, unservedRows] = await Promise.all([
      selectActiveDeployments(options.db),
      selectUnservedApps(options.db),
    ]);
    if (options.testDelayMs) await sleep(options.testDelayMs);
    const wanted = new Map(rows.map((row) => [keyOf(row), row]));
    let change = false;
    for (const [key, row] of wanted) {
      if (stopped) return;
      if (pinned(key, read) || served.get(key)?.app.version === row.deployment_id || failed.has(row.deployment_id)) {
        continue;
      }
      const app = options.deferBuilds && row.config_toml !== null
        ? deferredApp(row, row.config_toml)
        : await materialiseHere(row);
      // Checked again: an adopt may have begun while this deployment was materialised.
      if (!app || stopped || pinned(key, read)) continue;
      const replaced = served.get(key);
      if (replaced) builds.delete(replaced.app.version);
      served.set(key, { app, since: options.now() });
      change = true;
    }
    for (const key of [...served.keys()]) {
      if (wanted.has(key) || pinned(key, read)) continue;
      builds.delete(served.get(key)!.app.version);
      served.delete(key);
      change = true;
    }
    if (syncUnserved(unservedRows, read)) change = true;
    if (change && !stopped) await changed();
  }

  function sync(): Promise<void> {
    // A round not yet begun reads after this call: share it. Otherwise queue one after the current one,
    // so a caller never waits for more than two rounds however often polls and wake-ups come.
    if (queued) return queued;
    const round = tail.then(async () => {
      queued = undefined;
      if (stopped) return;
      await syncOnce().catch((error) => logger.error({ err: error }, "reading the active deployments failed"));
    });
    queued = round;
    tail = round;
    return round;
  }

  const unlisten = options.notifier.listen("runplane_deployments", () => void sync());
  const timer = setInterval(() => void sync(), options.pollMs ?? 2000);
  timer.unref();

  return {
    list: () => [...served.values()].map(({ app }) => app),
    unserved: () => [...unserved.values()],
    sync,
    async adopt(row, adoptOptions) {
      const key = keyOf(row);
      pins.set(key, { deploymentId: row.deployment_id });
      const app = await materialiseHere(row);
      if (!app) throw new Error(`Deployment ${row.deployment_id} was built but cannot be served here`);
      const staged = await stage(app, adoptOptions);
      if (!stopped) {
        served.set(key, { app, since: options.now() });
        unserved.delete(key);
        await changed();
      }
      // Served now (the runtime took its replicas over), or stopping: what is left of it stops.
      await staged?.release();
    },
    async reject(row, error) {
      const key = keyOf(row);
      pins.set(key, { deploymentId: row.deployment_id });
      if (served.has(key) || stopped) return;
      unserved.set(key, { projectId: row.project_id, name: row.app_id, deploymentId: row.deployment_id, error });
      await changed();
    },
    async settle(row) {
      const key = keyOf(row);
      const pin = pins.get(key);
      if (!pin || pin.deploymentId !== row.deployment_id) return await sync();
      pin.releasedAfterRead = reads;
      await sync();
      if (pins.get(key) === pin) pins.delete(key);
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      unlisten();
      await tail;
    },
  };
}
