/**
 * The client's public types: the records it returns (aliases of the contract's schemas) and the options
 * of its calls. `mod.ts` exports every one of them; the modules that implement the calls share them.
 */
import type { components } from "../generated/api.d.ts";
import type { RunplaneFetch } from "./safe_retry.ts";

type Schemas = components["schemas"];
/** A run's record. */
export type Run = Schemas["Run"];
/** A run's status; `success`, `failure` and `cancelled` are terminal. */
export type RunStatus = Schemas["RunStatus"];
/** A synchronous call's answer. */
export type RunResult = Schemas["RunResult"];
/** A page of runs, newest first. */
export type RunPage = Schemas["RunPage"];
/** A run's captured output, oldest line first. */
export type RunLog = Schemas["RunLog"];
/** One line a run's function wrote, with its time and stream. */
export type RunLogLine = Schemas["RunLogLine"];
/** How a followed run ended. */
export type RunLogEnd = Schemas["RunLogEnd"];
/** What following a run's log yields: each line, then the run's final status once it has ended. */
export type RunLogEvent = { line: RunLogLine } | { end: RunLogEnd };
/** One line of an app's output: a line one of its runs wrote, with that run's id. */
export type AppLogLine = Schemas["AppLogLine"];
/** A page of an app's output, every run's lines interleaved, oldest first. */
export type AppLogPage = Schemas["AppLogPage"];
/** An app's activity over the last hour or day, in buckets. */
export type AppStats = Schemas["AppStats"];
/** One change of a project's runs: created, started or ended. */
export type RunChange = Schemas["RunChange"];
/**
 * What following a project's runs yields: each change, or `resync` when changes may have been missed
 * (read the list of runs again).
 */
export type RunChangeEvent = { change: RunChange } | { resync: true };
/** The dependencies and commands a base-image digest covers. */
export type BaseImageRequest = Schemas["BaseImageRequest"];
/** A base-image digest and what a build of it will do with its virtualenv (`new` or `cached`). */
export type BaseImageHash = Schemas["BaseImageHash"];
/** A repository's tree at one commit. */
export type RepositoryTree = Schemas["RepositoryTree"];
/** The public keys that verify service-account tokens. */
export type JsonWebKeySet = Schemas["JsonWebKeySet"];
/** One version of an app and its build. */
export type Deployment = Schemas["Deployment"];
/** A page of an app's deployments, newest first. */
export type DeploymentPage = Schemas["DeploymentPage"];
/** An app: where it comes from, its state, scaling and replicas. */
export type App = Schemas["App"];
/** A service account as listed (never its token). */
export type ServiceAccount = Schemas["ServiceAccount"];
/** A new service account with its token (shown once). */
export type CreatedServiceAccount = Schemas["CreatedServiceAccount"];
/** What `createServiceAccount` mints. */
export type ServiceAccountRequest = Schemas["ServiceAccountRequest"];
/** A project secret as listed: its name and times, never its value. */
export type ProjectSecret = Schemas["ProjectSecret"];
/** Options of `createDeployment`. */
export interface CreateDeploymentOptions {
  signal?: AbortSignal;
  /** Called as the bundle's bytes are taken by the connection (for a progress bar). */
  onUploadProgress?(sent: number, total: number): void;
  /** What this version is, for people (1 to 500 characters); kept as the deployment's `message`. */
  message?: string;
  /**
   * A bundle's git commit, and whether its folder held changes the commit does not (`dirty`, needs
   * `commit`); a repository deployment's commit is the one its ref resolves to.
   */
  commit?: string;
  dirty?: boolean;
}
/** A repository folder to deploy. */
export type DeploymentSource = Schemas["DeploymentSourceRequest"]["source"];
/** What following a build log yields: each line, then the deployment once the build has ended. */
export type BuildLogEvent = { line: string } | { end: Deployment };

/**
 * Options of `createRunplaneClient`. At least one of `baseUrl` and `apiUrl`; one may serve both. The names
 * are the platform's: `base_url` is the REST API, `api_url` the (region-specific) run API.
 */
export interface RunplaneClientOptions {
  /** The REST API (`/v3/...`, `/v4/projects/...`, `/healthz`, ...); `apiUrl` when absent. */
  baseUrl?: string;
  /** The run API (`/v4/{project}/{app}/{function}`); `baseUrl` when absent. */
  apiUrl?: string;
  /** A service-account token, sent as `Authorization: Bearer`. */
  token?: string;
  /** Replaces `globalThis.fetch` (e.g. to add tracing or to check answers). */
  fetch?: RunplaneFetch;
}

/** Options of `run`, `runAsync` and `stream`. */
export interface RunOptions {
  /** An http(s) URL that receives the result after the run ends. */
  webhookEndpoint?: string;
  /** Signs the webhook deliveries (HMAC-SHA256); check them with `verifyWebhook`. */
  webhookSecret?: string;
  /**
   * Makes the call safe to retry: the same key and body within 24 h return the original run. `runAsync`
   * sends a fresh random key when this is absent; `run` and `stream` without one are never retried.
   */
  idempotencyKey?: string;
  /** Aborts the call (for `stream`, stops reading and closes the connection). */
  signal?: AbortSignal;
  /** A run of the same app this call runs again: recorded as the new run's `rerun_of`. */
  rerunOf?: string;
}

/** Options of `waitForRun`. */
export interface WaitForRunOptions {
  /** Stops waiting (rejects with the signal's reason). */
  signal?: AbortSignal;
  /** Gives up after this long with a `RunplaneError` of status 504 (default: wait forever). */
  timeoutMs?: number;
  /** The first delay between polls (default 200 ms); it grows by half each poll. */
  initialDelayMs?: number;
  /** The longest delay between polls (default 2000 ms). */
  maxDelayMs?: number;
  /** Called with every record fetched, terminal or not (for progress output). */
  onPoll?: (run: Run) => void;
}

/** Options of `getRun` and `cancelRun`. */
export interface RunCallOptions {
  signal?: AbortSignal;
}

/** Options of `appLogs`. */
export interface AppLogOptions extends RunCallOptions {
  /** Only lines written at or after this time (a `Date` or Unix ms; default: an hour ago). */
  since?: Date | number;
  /** `next_cursor` of the previous page. */
  cursor?: string;
  /** Page size (1 to 1000, default 200). */
  limit?: number;
}

/** Options of `appStats`. */
export interface AppStatsOptions extends RunCallOptions {
  /** The last hour (60 one-minute buckets, the default) or the last day (96 fifteen-minute buckets). */
  window?: "1h" | "24h";
}

/** Options of `listRuns`. */
export interface ListRunsOptions {
  status?: RunStatus;
  /** Page size, 1 to 200 (the server's default is 50). */
  limit?: number;
  /** `next_cursor` of the previous page. */
  cursor?: string;
  signal?: AbortSignal;
}

/** Options of `listProjectRuns`: `listRuns`' and the filters a project-wide listing adds. */
export interface ListProjectRunsOptions extends ListRunsOptions {
  /** Only runs of this app. */
  app?: string;
  /** Only calls of this function. */
  functionName?: string;
  mode?: "sync" | "async" | "stream" | "websocket";
  /** Only runs created at or after this time (RFC 3339). */
  createdAfter?: string;
  /** Only runs created before this time (RFC 3339). */
  createdBefore?: string;
}

/** Options of `repositoryTree`. */
export interface RepositoryTreeOptions {
  /** A branch, tag or commit sha; the default branch when absent. */
  ref?: string;
  /** The `etag` of an earlier answer: an unchanged tree then answers `{ notModified: true }`. */
  ifNoneMatch?: string;
  signal?: AbortSignal;
}

/** `repositoryTree`'s answer: the tree and its ETag, or only the ETag when unchanged. */
export type RepositoryTreeResult =
  | { notModified: false; etag: string; tree: RepositoryTree }
  | { notModified: true; etag: string };

/** A stream of a run's items; `runId` is known once the server has answered. */
export interface RunStream extends AsyncIterable<unknown> {
  readonly runId: string | undefined;
}
