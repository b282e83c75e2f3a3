/**
 * Deployments: an app's versions uploaded as bundles (or fetched from a repository), kept in the store
 * by digest, built by whichever process claims them, and served by every process once active. Free of
 * HTTP: handlers decode, call this, and map the views to responses.
 */
import { mkdir, readFile, rm } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import { randomBytesPooled, timeOrderedId } from "../random/mod.ts";
import {
  type AppConfig,
  AppConfigError,
  type AppInfo,
  type DeployedApp,
  parseAppConfig,
  type StagedVersion,
  type StageOptions,
  type UnservedApp,
} from "../runtime/mod.ts";
import type { Database, Notifier } from "../store/mod.ts";
import { type Builder, startBuilder } from "./_builder.ts";
import { bundleDigest, extractBundle } from "./_bundle_extract.ts";
import { fileChunks } from "./_bundle_files.ts";
import { type LocalApps, startLocalApps } from "./_local_apps.ts";
import { type BuildSettings, dependencyLayerReady, deployedAppRules } from "./_materialise.ts";
import {
  activate,
  type AppRow,
  BUNDLE_CHUNK_BYTES,
  type BundleSource,
  type DeploymentRow,
  insertDeployment,
  markAppDeleted,
  queuedRunsByApp,
  selectApps,
  selectDeployment,
  selectDeployments,
  selectLogLines,
  selectNewestDeployments,
} from "./_records.ts";
import { selectServed, type ServedRow } from "./_served_records.ts";
import { keepUnpacked, sweepUnpacked, UNPACKED_KEPT_MS } from "./_unpacked.ts";
import { SERVED_STALE_MS, type ServedReporter, startServedReporter } from "./_served_reporter.ts";

export { type BuildSettings, deploymentDir } from "./_materialise.ts";

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

/** A spooled upload: read a chunk at a time into one buffer (to check it, and to store it in rows), or linked. */
function fileSource(file: BundleFile): BundleSource {
  return { digest: file.digest, size: file.size, chunks: () => fileChunks(file.path), path: file.path };
}

/** A bundle in memory (a repository's archive), cut into chunks without copying. */
function bytesSource(bytes: Uint8Array): BundleSource {
  async function* chunks(): AsyncGenerator<Uint8Array> {
    for (let at = 0; at < bytes.byteLength; at += BUNDLE_CHUNK_BYTES) {
      yield bytes.subarray(at, at + BUNDLE_CHUNK_BYTES);
    }
  }
  return { digest: bundleDigest(bytes), size: bytes.byteLength, chunks };
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
}

/** Which app (and deployment) a call names. */
export interface AppRef {
  projectId: string;
  appId: string;
}

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
   * Whether a build here of base-image `digest` would reuse its virtualenv (a ready one is on this host)
   * rather than run pip.
   */
  dependencyLayerReady(digest: string): Promise<boolean>;
  /** Starts the build worker and the follower of active deployments; resolves after the first read. */
  start(): Promise<void>;
  stop(): Promise<void>;
}

const DEPLOYMENT_ID = /^dep_[0-9a-z]{26}$/;

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function deploymentView(row: DeploymentRow, activeId: string | null | undefined): DeploymentView {
  return {
    deployment_id: row.deployment_id,
    project_id: row.project_id,
    app_id: row.app_id,
    status: row.status as DeploymentView["status"],
    active: row.deployment_id === activeId,
    digest: row.bundle_digest,
    size_bytes: Number(row.size_bytes),
    source: row.source as DeploymentView["source"],
    repository: row.repository_json ? JSON.parse(row.repository_json) : null,
    message: row.message,
    commit: row.git_commit,
    dirty: Number(row.git_dirty) === 1,
    base_image_digest: row.base_image_digest,
    base_image_status: row.base_image_status as DeploymentView["base_image_status"],
    created_at: iso(row.created_at)!,
    started_at: iso(row.started_at),
    finished_at: iso(row.finished_at),
    error: row.error,
  };
}

function scalingOf(config: AppInfo["config"]): AppView["scaling"] {
  if (!config) return null;
  return {
    min_replicas: config.minReplicas,
    max_replicas: config.maxReplicas,
    replica_concurrency: config.replicaConcurrency,
    cooldown: config.cooldownMs / 1000,
    response_grace_period: config.responseGracePeriodMs / 1000,
  };
}

function hardwareOf(config: AppInfo["config"]): AppView["hardware"] {
  if (!config) return null;
  const { cpu, memoryBytes, gpuCount, compute } = config.hardware;
  return { cpu, memory: memoryBytes / 1024 ** 3, gpu_count: gpuCount, compute: compute ?? null };
}

function replicasOf(info: AppInfo | undefined): AppView["replicas"] {
  if (!info) return { starting: 0, idle: 0, busy: 0, gpus: [] };
  return {
    ...info.replicas,
    gpus: info.gpus.map((replica) => ({
      pid: replica.pid ?? null,
      gpus: replica.gpus.map((gpu) => ({ id: gpu.id, index: gpu.index, model: gpu.model })),
    })),
  };
}

function appNotFound(ref: AppRef): ProblemError {
  return new ProblemError("not-found", `Project ${ref.projectId} has no app named ${ref.appId}; deploy it first`);
}

function deploymentNotFound(ref: AppRef & { deploymentId: string }): ProblemError {
  return new ProblemError("not-found", `App ${ref.projectId}/${ref.appId} has no deployment ${ref.deploymentId}`);
}

/** `dirty` says something of `commit` only: without one it is refused (400). */
function checkLabel(label: DeploymentLabel): void {
  if (label.dirty !== undefined && label.commit === undefined) {
    throw new ProblemError("validation", "query.dirty says whether the folder matched query.commit; send both", {
      errors: [{ path: "query.dirty", message: "needs query.commit" }],
    });
  }
}

function isTerminal(status: string): boolean {
  return status === "ready" || status === "failed";
}

/** Creates the service; call `start()` to build and serve deployments. */
export function createDeployments(options: DeploymentsOptions): Deployments {
  const { db, logger, settings } = options;
  let builder: Builder | undefined;
  let localApps: LocalApps | undefined;
  let reporter: ServedReporter | undefined;

  /** Wakes every process's builder and follower of active deployments (they poll when this fails). */
  async function announce(): Promise<void> {
    await options.notifier.notify("runplane_deployments").catch((error) =>
      logger.warn({ err: error }, "announcing a deployment failed; other processes poll for it")
    );
  }

  function refuseDirectoryApp(ref: AppRef): void {
    const app = options.runtime.apps(ref.projectId).find((a) => a.name === ref.appId);
    if (app?.source === "directory") {
      throw new ProblemError(
        "conflict",
        `App ${ref.projectId}/${ref.appId} is served from the apps folder (RUNPLANE_APPS_DIR); deploy it under another name, or remove its folder first`,
      );
    }
  }

  /**
   * Checks the bundle unpacks safely and its runplane.toml loads, in a scratch folder, and that the
   * runtime would serve it (its replicas fit the host, its project stays within its replica limit). The
   * checked folder is kept for this host's build (see _unpacked.ts); returns what removes it.
   */
  async function checkBundle(ref: AppRef, bundle: BundleSource): Promise<() => Promise<void>> {
    const scratch = join(settings.dataDir, "uploads", `${Date.now()}-${randomBytesPooled(6).toString("hex")}`);
    await mkdir(join(settings.dataDir, "uploads"), { recursive: true });
    await sweepUnpacked(settings.dataDir, { olderThanMs: UNPACKED_KEPT_MS, now: Date.now() });
    try {
      await extractBundle(bundle.chunks(), scratch, settings.bundleLimits);
      const text = await readFile(join(scratch, "runplane.toml"), "utf8").catch(() => {
        throw new ProblemError(
          "validation",
          "The bundle has no runplane.toml at its root; pack the app folder itself (runplane deploy does)",
          { errors: [{ path: "body", message: "has no runplane.toml at its root" }] },
        );
      });
      let problem: string | undefined;
      try {
        const config = parseAppConfig(text, scratch, deployedAppRules(settings));
        problem = options.runtime.admissionProblem(ref.projectId, ref.appId, config);
      } catch (error) {
        if (!(error instanceof AppConfigError)) throw error;
        problem = error.message;
      }
      if (problem !== undefined) {
        throw new ProblemError("validation", `runplane.toml: ${problem}`, {
          errors: [{ path: "body.runplane.toml", message: problem }],
        });
      }
      return await keepUnpacked(settings.dataDir, { scratch, digest: bundle.digest });
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  }

  async function store(
    ref: AppRef,
    bundle: BundleSource,
    from: { label: DeploymentLabel; repository?: DeploymentView["repository"] },
  ): Promise<DeploymentView> {
    refuseDirectoryApp(ref);
    const dropUnpacked = await checkBundle(ref, bundle);
    const { label, repository } = from;
    const row = await insertDeployment(db, {
      deploymentId: timeOrderedId("dep_"),
      projectId: ref.projectId,
      appId: ref.appId,
      bundle,
      source: repository ? "repository" : "bundle",
      repository: repository ?? undefined,
      message: label.message,
      commit: repository?.commit ?? label.commit,
      dirty: repository ? false : label.dirty === true,
      now: options.now(),
    }, { bundleDir: settings.bundleDir }).catch(async (error: unknown) => {
      await dropUnpacked();
      throw error;
    });
    logger.info({ deployment_id: row.deployment_id, app: `${ref.projectId}/${ref.appId}` }, "deployment queued");
    builder?.wake();
    await announce();
    return deploymentView(row, null);
  }

  async function activeIdOf(ref: AppRef): Promise<string | null | undefined> {
    return (await selectApps(db, ref))[0]?.active_deployment_id;
  }

  async function row(ref: AppRef & { deploymentId: string }): Promise<DeploymentRow> {
    const found = await selectDeployment(db, ref);
    if (!found) throw deploymentNotFound(ref);
    return found;
  }

  async function view(ref: AppRef & { deploymentId: string }): Promise<DeploymentView> {
    const [found, activeId] = await Promise.all([row(ref), activeIdOf(ref)]);
    return deploymentView(found, activeId);
  }

  function appView(
    ref: AppRef,
    found: { stored?: AppRow; newest?: DeploymentRow; info?: AppInfo; queued: number; served: ServedRow[] },
  ): AppView {
    const { stored, newest, info } = found;
    const base = {
      project_id: ref.projectId,
      app_id: ref.appId,
      runtime: info?.config?.runtime ?? null,
      scaling: scalingOf(info?.config),
      hardware: hardwareOf(info?.config),
      replicas: replicasOf(info),
      queued_runs: found.queued,
    };
    if (!stored) {
      return {
        ...base,
        source: "directory",
        state: info?.error ? "failed" : "ready",
        active_deployment_id: null,
        error: info?.error ?? null,
        created_at: null,
        served_by: [],
      };
    }
    const building = newest !== undefined && !isTerminal(newest.status);
    // Without an active deployment the runtime's error only repeats a failed build's: the store says more.
    const loadError = stored.active_deployment_id ? info?.error : undefined;
    const state = loadError
      ? "failed"
      : stored.active_deployment_id
      ? "ready"
      : building
      ? "building"
      : "failed";
    const error = loadError
      ?? (stored.active_deployment_id ? null : newest?.status === "failed" ? newest.error : null);
    return {
      ...base,
      source: "deployment",
      state,
      active_deployment_id: stored.active_deployment_id,
      error,
      created_at: iso(stored.created_at),
      served_by: found.served.map((row) => ({
        process_id: row.process_id,
        host: row.host,
        deployment_id: row.deployment_id,
        since: iso(row.since)!,
      })),
    };
  }

  async function projectApps(projectId: string, appId?: string): Promise<AppView[]> {
    const [stored, newest, queued, served] = await Promise.all([
      selectApps(db, { projectId, appId }),
      selectNewestDeployments(db, projectId),
      queuedRunsByApp(db, projectId),
      selectServed(db, { projectId, appId, seenSince: options.now() - SERVED_STALE_MS }),
    ]);
    const infos = new Map(options.runtime.apps(projectId).map((info) => [info.name, info]));
    const names = new Set([...stored.map((a) => a.app_id)]);
    for (const [name, info] of infos) if (info.source === "directory") names.add(name);
    const storedByName = new Map(stored.map((a) => [a.app_id, a]));
    return [...names]
      .filter((name) => appId === undefined || name === appId)
      .sort()
      .map((name) => {
        const info = infos.get(name);
        // An app of the apps folder shadows a deployed one of the same name (the folder wins).
        const app = info?.source === "directory" ? undefined : storedByName.get(name);
        return appView({ projectId, appId: name }, {
          stored: app,
          newest: app ? newest.get(name) : undefined,
          info,
          queued: queued.get(name) ?? 0,
          served: app ? served.filter((row) => row.app_id === name) : [],
        });
      });
  }

  return {
    deployBundle(ref, bundle, label = {}) {
      checkLabel(label);
      return store(ref, fileSource(bundle), { label });
    },
    async deployRepository(ref, source, label = {}) {
      checkLabel(label);
      if (label.commit !== undefined) {
        throw new ProblemError(
          "validation",
          "A repository deployment's commit is the one its ref resolves to; leave query.commit out (or name it as source.ref)",
          { errors: [{ path: "query.commit", message: "must be absent when deploying from a repository" }] },
        );
      }
      refuseDirectoryApp(ref);
      const archive = await options.archiveRepository(ref.projectId, {
        ...source,
        maxBytes: settings.bundleLimitBytes,
      });
      return store(ref, bytesSource(archive.bytes), {
        label,
        repository: {
          owner: source.owner,
          repo: source.repo,
          ref: archive.ref,
          commit: archive.commit,
          path: source.path ?? "",
        },
      });
    },
    get: view,
    async list(ref, page) {
      if (page.cursor !== undefined && !DEPLOYMENT_ID.test(page.cursor)) {
        throw new ProblemError("validation", "query.cursor is not a cursor this API made; pass next_cursor as it was", {
          errors: [{ path: "query.cursor", message: "must be a next_cursor from a previous page" }],
        });
      }
      const [rows, activeId] = await Promise.all([
        selectDeployments(db, { ...ref, before: page.cursor, limit: page.limit + 1 }),
        activeIdOf(ref),
      ]);
      if (rows.length === 0 && activeId === undefined && !page.cursor) throw appNotFound(ref);
      const more = rows.length > page.limit;
      const shown = rows.slice(0, page.limit);
      return {
        deployments: shown.map((r) => deploymentView(r, activeId)),
        next_cursor: more ? shown[shown.length - 1].deployment_id : null,
      };
    },
    async activate(ref) {
      const found = await row(ref);
      if (found.status !== "ready") {
        throw new ProblemError(
          "conflict",
          `Deployment ${ref.deploymentId} is ${found.status}; only a ready deployment can be activated`,
        );
      }
      if (!(await activate(db, ref))) {
        throw new ProblemError("conflict", `App ${ref.projectId}/${ref.appId} was deleted; deploy it again`);
      }
      logger.info({ deployment_id: ref.deploymentId, app: `${ref.projectId}/${ref.appId}` }, "deployment activated");
      await announce();
      await localApps?.sync();
      return view(ref);
    },
    async logText(ref) {
      await row(ref);
      const lines: string[] = [];
      for (let after = 0;;) {
        const batch = await selectLogLines(db, { deploymentId: ref.deploymentId, afterSeq: after, limit: 5000 });
        for (const l of batch) lines.push(l.line);
        if (batch.length < 5000) break;
        after = batch[batch.length - 1].seq;
      }
      return lines.length ? `${lines.join("\n")}\n` : "";
    },
    async followLogs(ref, signal) {
      await row(ref);
      return (async function*() {
        let after = 0;
        while (!signal.aborted) {
          const current = await row(ref);
          const batch = await selectLogLines(db, { deploymentId: ref.deploymentId, afterSeq: after, limit: 1000 });
          for (const l of batch) yield { line: l.line };
          if (batch.length) after = batch[batch.length - 1].seq;
          // The status was read before the lines: once terminal, every line was written already.
          if (isTerminal(current.status) && batch.length < 1000) {
            yield { end: deploymentView(current, await activeIdOf(ref)) };
            return;
          }
          if (batch.length < 1000) await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
    },
    listApps(projectId) {
      return projectApps(projectId);
    },
    async getApp(ref) {
      const [found] = await projectApps(ref.projectId, ref.appId);
      if (!found) throw appNotFound(ref);
      return found;
    },
    async deleteApp(ref) {
      refuseDirectoryApp(ref);
      if (!(await markAppDeleted(db, { ...ref, now: options.now() }))) throw appNotFound(ref);
      logger.info({ app: `${ref.projectId}/${ref.appId}` }, "app deleted");
      await announce();
      await localApps?.sync();
    },
    deployedApps() {
      return localApps?.list() ?? [];
    },
    unservedApps() {
      return localApps?.unserved() ?? [];
    },
    dependencyLayerReady(digest) {
      return dependencyLayerReady(settings.dataDir, digest);
    },
    async start() {
      // What an earlier process kept for its builds: a build here unpacks from the store instead.
      await sweepUnpacked(settings.dataDir, { olderThanMs: 0, now: Date.now() });
      const served = options.followOnly ? undefined : startServedReporter({
        db,
        logger,
        processId: options.owner,
        host: options.host ?? hostname(),
        now: options.now,
      });
      reporter = served;
      localApps = startLocalApps({
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
      if (options.followOnly) return await localApps.sync();
      builder = startBuilder({
        db,
        notifier: options.notifier,
        logger,
        owner: options.owner,
        now: options.now,
        settings,
        pollMs: options.pollMs,
        serve: async (deployment, serving) => await localApps?.adopt(deployment, serving),
        rejected: async (deployment, error) => await localApps?.reject(deployment, error),
        settled: async (deployment) => await localApps?.settle(deployment),
      });
      await localApps.sync();
    },
    async stop() {
      await builder?.stop();
      await localApps?.stop();
      // After the follower: nothing reports after this, and this process's rows go.
      await reporter?.stop();
    },
  };
}

export { type BundleLimits, DEFAULT_BUNDLE_LIMITS, extractBundle } from "./_bundle_extract.ts";
