/**
 * What the deployments service speaks of (re-exported by mod.ts): the views the API shows, what a deployer
 * hands in, the runtime as the service sees it, and the service's options.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { AppConfig, AppInfo, DeployedApp, StagedVersion, StageOptions } from "../runtime/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import type { BuildSettings } from "./_materialise.ts";

/** A deployment as the API shows it. */
export interface DeploymentView {
  deployment_id: string;
  project_id: string;
  app_id: string;
  status: "queued" | "building" | "ready" | "failed";
  active: boolean;
  digest: string;
  size_bytes: number;
  source: "bundle" | "repository";
  repository: { owner: string; repo: string; ref: string; commit: string; path: string } | null;
  message: string | null;
  commit: string | null;
  dirty: boolean;
  base_image_digest: string | null;
  base_image_status: "new" | "cached" | null;
  /** The OCI image its replicas run in (`[build] base_image`); null: the host's system. */
  image: { reference: string; digest: string } | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  error: string | null;
}

/** An app as the API shows it. */
export interface AppView {
  project_id: string;
  app_id: string;
  source: "directory" | "deployment";
  state: "building" | "ready" | "failed";
  runtime: "python" | "custom" | null;
  scaling: {
    min_replicas: number;
    max_replicas: number;
    replica_concurrency: number;
    cooldown: number;
    response_grace_period: number;
  } | null;
  hardware: { cpu: number; memory: number; gpu_count: number; compute: string | null } | null;
  active_deployment_id: string | null;
  error: string | null;
  replicas: {
    starting: number;
    idle: number;
    busy: number;
    /** Which GPUs each replica on this process holds. */
    gpus: Array<{ pid: number | null; gpus: Array<{ id: string; index: number | null; model: string | null }> }>;
  };
  queued_runs: number;
  created_at: string | null;
  /** Which deployment each live server process serves (deployed apps; empty for a directory app). */
  served_by: Array<{ process_id: string; host: string; deployment_id: string; since: string }>;
}

/** An uploaded bundle on disk (the HTTP layer spooled it there, and removes it after the call). */
export interface BundleFile {
  path: string;
  size: number;
  /** `sha256:<hex>` of the file's bytes. */
  digest: string;
}

/**
 * What a deployer says of a version: a message for people, and the git commit its files come from (with
 * whether the folder held changes that commit does not). A repository's commit is the one its ref
 * resolves to, never the deployer's.
 */
export interface DeploymentLabel {
  message?: string;
  commit?: string;
  dirty?: boolean;
}

/** A repository folder to deploy. */
export interface RepositorySource {
  owner: string;
  repo: string;
  ref?: string;
  path?: string;
}

/** Reads a repository folder as a gzip tarball (the project's tree provider). */
export type ArchiveRepository = (
  projectId: string,
  request: RepositorySource & { maxBytes: number },
) => Promise<{ ref: string; commit: string; bytes: Uint8Array }>;

/** What the apps of this process look like to the deployments (the runtime). */
export interface RuntimeView {
  apps(projectId?: string): AppInfo[];
  reload(): Promise<void>;
  /** Why the runtime would refuse to serve this app with `config` (host budget, project replica limit). */
  admissionProblem(projectId: string, app: string, config: AppConfig): string | undefined;
  /** Starts a deployment built here and resolves once it serves (see `Runtime.stage`). */
  stage(app: DeployedApp, options?: StageOptions): Promise<StagedVersion>;
}

/** Options of `createDeployments`. */
export interface DeploymentsOptions {
  db: Kysely<Database>;
  notifier: Notifier;
  logger: Logger;
  /** This process's lease owner id (also its id in `served_by`). */
  owner: string;
  /** This process's host name in `served_by` (default: the OS's). */
  host?: string;
  now(): number;
  settings: BuildSettings & { bundleLimitBytes: number };
  runtime: RuntimeView;
  archiveRepository: ArchiveRepository;
  /** How often the store is polled for builds and active deployments (default 2 s; wake-ups come sooner). */
  pollMs?: number;
  /** A host of a cluster: build a deployment only to run one of its replicas here (see `startLocalApps`). */
  deferBuilds?: boolean;
  /** Test only (RUNPLANE_TEST_DELAY_LOCAL_SYNC): the follower's pause between reading and switching. */
  testDelayLocalSyncMs?: number;
  /**
   * A host's worker (`RUNPLANE_WORKERS` > 1): only follow the active deployments, to know their apps
   * (builds deferred, never made here); no builds claimed, nothing reported in `served_by`. The host's
   * supervisor builds and serves.
   */
  followOnly?: boolean;
  /**
   * The bounded cache of image roots and system layers (`RUNPLANE_IMAGE_CACHE_GB`, see _image_cache.ts);
   * unset, or a bound of 0: nothing is evicted.
   */
  imageCache?: { boundBytes: number; minAgeMs: number };
}

/** Which app (and deployment) a call names. */
export interface AppRef {
  projectId: string;
  appId: string;
}
