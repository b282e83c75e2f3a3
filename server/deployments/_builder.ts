/**
 * The build worker of one process: claims queued builds from the store (one at a time, oldest first,
 * one per app across every process), builds each with its log in the store, and makes a successful
 * one its app's active deployment. A build whose process died is failed once its lease has expired.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database, Notifier } from "../store/mod.ts";
import { type BuildLogLine, createBuildLog } from "./_build_log.ts";
import { type BuildSettings, DeploymentBuildError, materialise } from "./_materialise.ts";
import {
  claimNextBuild,
  type DeploymentRow,
  failAbandonedBuilds,
  finishBuild,
  recordBaseImage,
  recordImage,
  renewBuildLease,
} from "./_records.ts";

/** Options of `startBuilder`. */
export interface BuilderOptions {
  db: Kysely<Database>;
  notifier: Notifier;
  logger: Logger;
  owner: string;
  now(): number;
  settings: BuildSettings;
  /** How long a claim lasts without renewal (renewed every third of it). */
  leaseMs?: number;
  /** How often the queue is polled when no wake-up comes. */
  pollMs?: number;
  /**
   * Called once a build succeeded, before it is recorded `ready` and active: resolves when this process
   * serves the deployment (a replica of it started and loaded), so that a caller who sees "ready"
   * reaches the new version here. Rejects when it does not load (a `DeploymentBuildError` says why; what
   * the app printed goes to `log`): the build fails, and the previous deployment goes on serving.
   */
  serve(deployment: DeploymentRow, options: { log(line: BuildLogLine): void; signal: AbortSignal }): Promise<void>;
  /** Called once a build failed, before that is recorded: a caller who sees "failed" gets its 503 here. */
  rejected?(deployment: DeploymentRow, error: string): Promise<void>;
  /** Called once the build's end is recorded (or could not be): the store decides what is served again. */
  settled(deployment: DeploymentRow): Promise<void>;
}

/** A running build worker. */
export interface Builder {
  /** Looks for queued builds now. */
  wake(): void;
  /** Stops claiming; waits for the build under way to end. */
  stop(): Promise<void>;
}

/**
 * What a build records as soon as it learns it: its plan (the base-image digest and the `runplane.toml` it
 * read) and the image of `[build] base_image` it runs in, once pulled.
 */
function recordingHooks(
  db: Kysely<Database>,
  deploymentId: string,
): Pick<Parameters<typeof materialise>[2], "onPlan" | "onImage"> {
  return {
    onPlan: (plan) => recordBaseImage(db, { deploymentId, status: null, ...plan }),
    onImage: (image) => recordImage(db, { deploymentId, reference: image.reference, digest: image.digest }),
  };
}

/** Starts the worker. */
export function startBuilder(options: BuilderOptions): Builder {
  const { db, logger } = options;
  const leaseMs = options.leaseMs ?? 30_000;
  let stopped = false;
  // A wake-up that comes while a claim is under way is kept, so the next pause does not wait for it.
  let woken = false;
  let wakeUp: () => void = () => {};
  const stopping = new AbortController();
  const unlisten = options.notifier.listen("runplane_deployments", wake);

  function wake(): void {
    woken = true;
    wakeUp();
  }

  async function build(deployment: DeploymentRow): Promise<void> {
    const id = deployment.deployment_id;
    const app = `${deployment.project_id}/${deployment.app_id}`;
    logger.info({ deployment_id: id, app }, "build started");
    const log = createBuildLog(db, id, {
      now: options.now,
      onError: (error) => logger.warn({ err: error, deployment_id: id }, "writing a build log line failed"),
    });
    const renewal = setInterval(() => {
      renewBuildLease(db, { deploymentId: id, owner: options.owner, until: options.now() + leaseMs }).catch((error) =>
        logger.warn({ err: error, deployment_id: id }, "renewing a build's lease failed")
      );
    }, leaseMs / 3);
    let error: string | undefined;
    try {
      const done = await materialise(db, deployment, {
        ...options.settings,
        log: (line) => log.write(line),
        signal: stopping.signal,
        ...recordingHooks(db, id),
      });
      await recordBaseImage(db, {
        deploymentId: id,
        digest: done.baseImageDigest,
        status: done.venv === "none" ? null : done.venv,
      });
      await options.serve(deployment, { log: (line) => log.write(line), signal: stopping.signal });
      log.write({ stream: "build", text: "==> ready: new calls go to this deployment" });
    } catch (failure) {
      if (!(failure instanceof DeploymentBuildError)) {
        logger.error({ err: failure, deployment_id: id }, "build failed unexpectedly");
      }
      error = stopping.signal.aborted
        ? "The server stopped during the build; deploy again"
        : failure instanceof DeploymentBuildError
        ? failure.message
        : "The build failed unexpectedly; see the server log";
      log.write({ stream: "build", text: `==> failed: ${error}` });
    } finally {
      clearInterval(renewal);
    }
    await log.close();
    if (error !== undefined) {
      await options.rejected?.(deployment, error).catch((e) =>
        logger.warn({ err: e, deployment_id: id }, "serving a failed build's 503 here failed; the store says it soon")
      );
    }
    const finished = await finishBuild(db, { deployment, owner: options.owner, now: options.now(), error }).finally(
      () => options.settled(deployment),
    );
    logger.info({ deployment_id: id, app, status: error ? "failed" : "ready", recorded: finished }, "build ended");
    if (finished && !error) {
      await options.notifier.notify("runplane_deployments").catch((e) =>
        logger.warn({ err: e }, "announcing a deployment failed; other processes poll for it")
      );
    }
  }

  function pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (woken) {
        woken = false;
        return resolve();
      }
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        woken = false;
        wakeUp = () => {};
        resolve();
      }
      wakeUp = done;
    });
  }

  async function loop(): Promise<void> {
    while (!stopped) {
      woken = false;
      try {
        const deployment = await claimNextBuild(db, { owner: options.owner, leaseMs, now: options.now() });
        if (deployment) {
          await build(deployment);
          continue;
        }
        const abandoned = await failAbandonedBuilds(db, options.now());
        if (abandoned) logger.warn({ builds: abandoned }, "failed builds whose process stopped");
      } catch (error) {
        logger.error({ err: error }, "the build worker failed; it retries");
      }
      if (!stopped) await pause(options.pollMs ?? 2000);
    }
  }

  const running = loop();
  return {
    wake,
    async stop() {
      stopped = true;
      unlisten();
      stopping.abort(new Error("The server is stopping"));
      wakeUp();
      await running;
    },
  };
}
