/**
 * Starting a deployment built here before it is served (see `LocalApps.adopt`): ready only once the
 * runtime started a replica of it and it serves, with what it said in the build's log when it does not.
 */
import { AppStartError, type DeployedApp, type StagedVersion } from "../runtime/mod.ts";
import type { BuildLogLine } from "./_build_log.ts";
import { DeploymentBuildError } from "./_materialise.ts";

/** Options of `LocalApps.adopt`. */
export interface AdoptOptions {
  /** The build's log: what the app said when it did not load goes there. */
  log(line: BuildLogLine): void;
  /** Stops the replica started for the check (the server is stopping). */
  signal?: AbortSignal;
}

/** Starts a deployment built here and resolves once it serves (the runtime's `stage`). */
export type StageApp = (app: DeployedApp, options: { signal?: AbortSignal }) => Promise<StagedVersion>;

/** Options of `stageApp`. */
export interface StageAppOptions extends AdoptOptions {
  /** The runtime's `stage`; without it nothing is started. */
  stage?: StageApp;
  /** Whether a deployment of the app serves here (it goes on serving when this one does not). */
  serving(): boolean;
}

/** Starts `app` and resolves once it serves; a `DeploymentBuildError` with what it said when it does not. */
export async function stageApp(app: DeployedApp, options: StageAppOptions): Promise<StagedVersion | undefined> {
  const { log, signal } = options;
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
    log({
      stream: "build",
      text: options.serving()
        ? "==> the deployment serving before goes on serving"
        : "==> no deployment of this app serves: its calls get 503 app-unavailable until one is ready",
    });
    throw new DeploymentBuildError(error.message, { cause: error });
  }
}
