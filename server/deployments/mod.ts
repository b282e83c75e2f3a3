/**
 * Deployments: an app's versions uploaded as bundles (or fetched from a repository), kept in the store
 * by digest, built by whichever process claims them, and served by every process once active. Free of
 * HTTP: handlers decode, call this, and map the views to responses.
 */
import type { BaseImageRequest } from "../builds/mod.ts";
import type { DeployedApp, UnservedApp } from "../runtime/mod.ts";
import { activateDeployment, deleteApp } from "./_app_changes.ts";
import { projectApps } from "./_app_views.ts";
import { buildLogText, followBuildLog } from "./_build_log_reader.ts";
import { deployBundle, deployRepository } from "./_deploy.ts";
import { appNotFound, listDeployments, readDeployment } from "./_deployment_views.ts";
import { buildLayersReady } from "./_layers_ready.ts";
import { Serving } from "./_serving.ts";
import type {
  AppRef,
  AppView,
  BundleFile,
  DeploymentLabel,
  DeploymentsOptions,
  DeploymentView,
  RepositorySource,
} from "./_types.ts";

export { type BuildSettings, deploymentDir } from "./_materialise.ts";
export type {
  AppRef,
  AppView,
  ArchiveRepository,
  BundleFile,
  DeploymentLabel,
  DeploymentsOptions,
  DeploymentView,
  RepositorySource,
  RuntimeView,
} from "./_types.ts";

/** The deployments service. */
export interface Deployments {
  /**
   * Stores an uploaded bundle as a new deployment of the app (made if new); the build follows. The file
   * is read a chunk at a time (checked, then stored: linked into the data dir on SQLite, in rows on
   * PostgreSQL), never whole into memory; the caller removes it.
   */
  deployBundle(ref: AppRef, bundle: BundleFile, label?: DeploymentLabel): Promise<DeploymentView>;
  /** Fetches a repository folder and deploys it like a bundle (a `label.commit` is refused: 400). */
  deployRepository(ref: AppRef, source: RepositorySource, label?: DeploymentLabel): Promise<DeploymentView>;
  get(ref: AppRef & { deploymentId: string }): Promise<DeploymentView>;
  list(
    ref: AppRef,
    page: { limit: number; cursor?: string },
  ): Promise<{ deployments: DeploymentView[]; next_cursor: string | null }>;
  /** Makes a `ready` deployment active (409 otherwise). */
  activate(ref: AppRef & { deploymentId: string }): Promise<DeploymentView>;
  /** The build log so far, one line per line. */
  logText(ref: AppRef & { deploymentId: string }): Promise<string>;
  /** The build log line by line as it is written, then the deployment once its build has ended. */
  followLogs(
    ref: AppRef & { deploymentId: string },
    signal: AbortSignal,
  ): Promise<AsyncIterable<{ line: string } | { end: DeploymentView }>>;
  listApps(projectId: string): Promise<AppView[]>;
  getApp(ref: AppRef): Promise<AppView>;
  /** Deletes a deployed app: new calls 404 at once, calls in flight finish (409 for a directory app). */
  deleteApp(ref: AppRef): Promise<void>;
  /** The deployed apps ready on this host (the runtime serves them). */
  deployedApps(): DeployedApp[];
  /** The deployed apps no deployment serves, their newest build failed (the runtime answers 503 for them). */
  unservedApps(): UnservedApp[];
  /**
   * Whether a build here of a base-image `request` (of `digest`) would build nothing: every layer it needs
   * (the image, its system layer, the virtualenv) is on this host.
   */
  layersReady(request: BaseImageRequest, options: { digest: string }): Promise<boolean>;
  /** Starts the build worker and the follower of active deployments; resolves after the first read. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Creates the service; call `start()` to build and serve deployments. */
export function createDeployments(options: DeploymentsOptions): Deployments {
  const { db } = options;
  const serving = new Serving(options);
  const context = { options, serving };
  return {
    deployBundle(ref, bundle, label = {}) {
      return deployBundle(context, { ref, bundle, label });
    },
    deployRepository(ref, source, label = {}) {
      return deployRepository(context, { ref, source, label });
    },
    get(ref) {
      return readDeployment(db, ref);
    },
    list(ref, page) {
      return listDeployments(db, { ref, page });
    },
    activate(ref) {
      return activateDeployment(context, ref);
    },
    logText(ref) {
      return buildLogText(db, ref);
    },
    followLogs(ref, signal) {
      return followBuildLog(db, { ref, signal });
    },
    listApps(projectId) {
      return projectApps(options, { projectId });
    },
    async getApp(ref) {
      const [found] = await projectApps(options, { projectId: ref.projectId, appId: ref.appId });
      if (!found) throw appNotFound(ref);
      return found;
    },
    deleteApp(ref) {
      return deleteApp(context, ref);
    },
    deployedApps() {
      return serving.list();
    },
    unservedApps() {
      return serving.unserved();
    },
    layersReady(request, { digest }) {
      return buildLayersReady(request, { digest, dataDir: options.settings.dataDir, images: options.settings.images });
    },
    start() {
      return serving.start();
    },
    stop() {
      return serving.stop();
    },
  };
}

export { type BundleLimits, DEFAULT_BUNDLE_LIMITS, extractBundle } from "./_bundle_extract.ts";
