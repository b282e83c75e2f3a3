/**
 * The typed Runplane client for other services: openapi-fetch over the generated `paths`, plus what
 * openapi-fetch cannot do by itself — stream iteration, polling a run to its end, webhook verification.
 *
 * ```ts
 * const runplane = createRunplaneClient({ baseUrl: "https://api.example.com", apiUrl: "https://run.example.com", token });
 * const { result } = await runplane.run("p-demo/hello", { name: "Ada" });
 * for await (const item of runplane.stream("p-demo/stream", { count: 3 })) console.log(item);
 * ```
 *
 * Every failed call throws a `RunplaneError` carrying the problem document, the status and the run id.
 */
import type { Client } from "openapi-fetch";
import type { components, paths } from "../generated/api.d.ts";
import { AppInsights } from "./_app_insights.ts";
import { Apps } from "./_apps.ts";
import { BuildSupport } from "./_build_support.ts";
import { createClientContext } from "./_client_context.ts";
import { Deployments } from "./_deployments.ts";
import { FunctionCalls } from "./_function_calls.ts";
import { ProjectSecrets } from "./_project_secrets.ts";
import { RunLogs } from "./_run_logs.ts";
import { Runs } from "./_runs.ts";
import { ServerInfo } from "./_server_info.ts";
import { ServiceAccounts } from "./_service_accounts.ts";
import { VolumesClient } from "./_volumes.ts";
import { type ConnectOptions, type WebSocketLike, WebSockets } from "./_websockets.ts";
import type { AppRef } from "./app_ref.ts";
import type {
  App,
  AppLogLine,
  AppLogOptions,
  AppLogPage,
  AppStats,
  AppStatsOptions,
  BaseImageHash,
  BaseImageRequest,
  BuildLogEvent,
  CreateDeploymentOptions,
  CreatedServiceAccount,
  Deployment,
  DeploymentPage,
  DeploymentSource,
  JsonWebKeySet,
  ListProjectRunsOptions,
  ListRunsOptions,
  ProjectSecret,
  RepositoryTreeOptions,
  RepositoryTreeResult,
  Run,
  RunCallOptions,
  RunChangeEvent,
  RunLog,
  RunLogEvent,
  RunOptions,
  RunPage,
  RunplaneClientOptions,
  RunResult,
  RunStream,
  ServiceAccount,
  ServiceAccountRequest,
  WaitForRunOptions,
} from "./types.ts";

export type { components, paths } from "../generated/api.d.ts";
export {
  type VolumeFileInfo,
  type VolumeFileWritten,
  type VolumeInfo,
  VolumesClient,
  type VolumesClientOptions,
} from "./_volumes.ts";
export type { ConnectOptions, WebSocketClass, WebSocketLike } from "./_websockets.ts";
export { type AppLocation, type AppRef, DEFAULT_FUNCTION, resolveAppRef } from "./app_ref.ts";
export { parseStreamItem, readEventStream } from "./event_stream.ts";
export { errorFromResponse, isRunplaneError, type Problem, RunplaneError } from "./runplane_error.ts";
export {
  isConnectionFailure,
  isSafeToRetry,
  MAX_RETRY_AFTER_MS,
  RunplaneConnectionError,
  type RunplaneFetch,
  retryDelayMs,
} from "./safe_retry.ts";
export {
  verifyWebhook,
  type VerifyWebhookOptions,
  type WebhookHeaders,
  type WebhookVerification,
} from "./webhook_verifier.ts";

export { TERMINAL_STATUSES } from "./_runs.ts";
export type {
  App,
  AppLogLine,
  AppLogOptions,
  AppLogPage,
  AppStats,
  AppStatsOptions,
  BaseImageHash,
  BaseImageRequest,
  BuildLogEvent,
  CreateDeploymentOptions,
  CreatedServiceAccount,
  Deployment,
  DeploymentPage,
  DeploymentSource,
  JsonWebKeySet,
  ListProjectRunsOptions,
  ListRunsOptions,
  ProjectSecret,
  RepositoryTree,
  RepositoryTreeOptions,
  RepositoryTreeResult,
  Run,
  RunCallOptions,
  RunChange,
  RunChangeEvent,
  RunLog,
  RunLogEnd,
  RunLogEvent,
  RunLogLine,
  RunOptions,
  RunPage,
  RunplaneClientOptions,
  RunResult,
  RunStatus,
  RunStream,
  ServiceAccount,
  ServiceAccountRequest,
  WaitForRunOptions,
} from "./types.ts";

type Schemas = components["schemas"];

// Each call below is a method of one small class per group of calls (`FunctionCalls` in _function_calls.ts,
// `Runs` in _runs.ts, `RunLogs`, `Deployments`, `Apps`, `ServiceAccounts`, `ProjectSecrets`, `BuildSupport`,
// `ServerInfo`), which `createRunplaneClient` binds: go there for how a call is made.

/** The client `createRunplaneClient` returns. */
export interface RunplaneClient {
  /** openapi-fetch on the REST API, for calls this wrapper does not cover. */
  readonly api: Client<paths>;
  /** openapi-fetch on the run API. */
  readonly runApi: Client<paths>;
  /**
   * The project's volumes on the REST API: `create`, `list`, `delete`; their files `upload`ed and
   * `download`ed as streams (never held whole), listed (`files`, page after page), `stat`, `deleteFile`.
   */
  readonly volumes: VolumesClient;
  /** Calls a function and resolves with its result (a streaming function's items are collected). */
  run(app: AppRef, input?: Record<string, unknown>, options?: RunOptions): Promise<RunResult>;
  /**
   * Queues a run and resolves with its id at once. The call carries `idempotencyKey` (a fresh random one
   * when absent), so a broken connection or a 503 is retried once without making a second run; when the
   * retry fails too it rejects with a `RunplaneConnectionError` naming the key.
   */
  runAsync(app: AppRef, input?: Record<string, unknown>, options?: RunOptions): Promise<string>;
  /** Calls a function and yields its items as they arrive; an `event: error` throws. */
  stream(app: AppRef, input?: Record<string, unknown>, options?: RunOptions): RunStream;
  /**
   * A run's record. `getRun(runId)` works for a run this client started or listed (it remembers the
   * app of the last 10,000 run ids it saw); any other run needs its app: `getRun(app, runId)`.
   */
  getRun(runId: string, options?: RunCallOptions): Promise<Run>;
  getRun(app: AppRef, runId: string, options?: RunCallOptions): Promise<Run>;
  /**
   * Polls a run with backoff until it is terminal; resolves with the final record. Takes the run id
   * alone for a run this client started, like `getRun`.
   */
  waitForRun(runId: string, options?: WaitForRunOptions): Promise<Run>;
  waitForRun(app: AppRef, runId: string, options?: WaitForRunOptions): Promise<Run>;
  /** A page of an app's runs, newest first. */
  listRuns(app: AppRef, options?: ListRunsOptions): Promise<RunPage>;
  /**
   * Opens a WebSocket to a custom runtime's route `path` (query string included) with a single-use ticket
   * (`createWebSocketTicket`): resolves with the socket as constructed (wait for `open`). Node 20 has no
   * WebSocket class: pass one as `options.WebSocket` (the `ws` package's).
   */
  connect<S = WebSocketLike>(app: AppRef, path: string, options?: ConnectOptions<S>): Promise<S>;
  /** A page of a project's runs across all its apps, newest first, filtered (`listProjectRuns`). */
  listProjectRuns(project: string, options?: ListProjectRunsOptions): Promise<RunPage>;
  /** Cancels a queued or running run; resolves with its record. Takes the run id alone like `getRun`. */
  cancelRun(runId: string, options?: RunCallOptions): Promise<Run>;
  cancelRun(app: AppRef, runId: string, options?: RunCallOptions): Promise<Run>;
  /** A run's captured output so far (its function's stdout, stderr and `logging`). */
  runLogs(app: AppRef, runId: string, options?: RunCallOptions): Promise<RunLog>;
  /** Follows a run's output line by line until the run ends, then yields its final status. */
  followRunLogs(app: AppRef, runId: string, options?: RunCallOptions): AsyncIterable<RunLogEvent>;
  /** A page of an app's output: every run's lines interleaved, each with its run id (`getAppLogs`). */
  appLogs(app: AppRef, options?: AppLogOptions): Promise<AppLogPage>;
  /** An app's lines from `since` on, then each line any of its runs writes, until `signal` aborts. */
  followAppLogs(app: AppRef, options?: Pick<AppLogOptions, "since" | "signal">): AsyncIterable<AppLogLine>;
  /** An app's runs by outcome, p50/p95 run time, cold starts and replicas over the last hour or day (`getAppStats`). */
  appStats(app: AppRef, options?: AppStatsOptions): Promise<AppStats>;
  /**
   * Follows the project's runs (every app, every server process) until `signal` aborts or the server
   * ends the stream: each change as it happens, and `resync` when some may have been missed.
   */
  watchRuns(project: string, options?: RunCallOptions): AsyncIterable<RunChangeEvent>;
  /**
   * Delivers a finished run's webhook once more (a new attempt, signed as the first); resolves with the
   * run's record. A 409 `RunplaneError` when the run has not ended, had no webhook or its result expired.
   */
  redeliverWebhook(app: AppRef, runId: string, options?: RunCallOptions): Promise<Run>;
  /** Deploys an app: a bundle (the folder as a gzip tarball, see `packBundle`) or a repository folder. */
  createDeployment(
    app: AppRef,
    body: Uint8Array | { source: DeploymentSource },
    options?: CreateDeploymentOptions,
  ): Promise<Deployment>;
  getDeployment(app: AppRef, deploymentId: string, options?: { signal?: AbortSignal }): Promise<Deployment>;
  /** A page of an app's deployments, newest first. */
  listDeployments(
    app: AppRef,
    options?: { limit?: number; cursor?: string; signal?: AbortSignal },
  ): Promise<DeploymentPage>;
  /** Makes a `ready` deployment the active one (a rollback, or a roll forward). */
  activateDeployment(app: AppRef, deploymentId: string, options?: { signal?: AbortSignal }): Promise<Deployment>;
  /** A deployment's build log so far, as text. */
  deploymentLogs(app: AppRef, deploymentId: string, options?: { signal?: AbortSignal }): Promise<string>;
  /** Follows a build's log line by line, then yields the deployment once the build has ended. */
  followDeploymentLogs(
    app: AppRef,
    deploymentId: string,
    options?: { signal?: AbortSignal },
  ): AsyncIterable<BuildLogEvent>;
  /** The project's apps: from the apps folder and deployed. */
  listApps(project: string, options?: { signal?: AbortSignal }): Promise<App[]>;
  getApp(app: AppRef, options?: { signal?: AbortSignal }): Promise<App>;
  /** Deletes a deployed app: new calls answer 404, calls in flight finish. */
  deleteApp(app: AppRef, options?: { signal?: AbortSignal }): Promise<void>;
  /** Mints a token (the `admin` scope; never beyond the caller's scopes or lifetime); the token is shown once. */
  createServiceAccount(
    project: string,
    request: ServiceAccountRequest,
    options?: { signal?: AbortSignal },
  ): Promise<CreatedServiceAccount>;
  /** The project's service accounts, oldest first, with when each was last used. */
  listServiceAccounts(project: string, options?: { signal?: AbortSignal }): Promise<ServiceAccount[]>;
  /** Revokes a service account: its token is refused from the next request on. */
  revokeServiceAccount(project: string, serviceAccountId: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** The project's secrets by name (the `deploy` scope); never a value. */
  listProjectSecrets(project: string, options?: { signal?: AbortSignal }): Promise<ProjectSecret[]>;
  /**
   * Sets a project secret (the `deploy` scope): `created` is false when a value was replaced. The
   * project's replicas get it as an environment variable; the value is never shown again.
   */
  setProjectSecret(
    project: string,
    secret: { name: string; value: string },
    options?: { signal?: AbortSignal },
  ): Promise<{ created: boolean; secret: ProjectSecret }>;
  /** Deletes a project secret (a 404 `RunplaneError` when there is none by that name). */
  deleteProjectSecret(project: string, name: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** The digest of an app's build dependencies and whether a build will make (`new`) or reuse (`cached`) its virtualenv. */
  baseImageHash(app: AppRef, request: BaseImageRequest, options?: { signal?: AbortSignal }): Promise<BaseImageHash>;
  /** A repository's tree (`"owner/repo"`) through a project's git integration. */
  repositoryTree(project: string, repository: string, options?: RepositoryTreeOptions): Promise<RepositoryTreeResult>;
  /** The public keys that verify service-account tokens. */
  jwks(): Promise<JsonWebKeySet>;
  /** Liveness. */
  health(): Promise<{ status: "ok" }>;
  /**
   * Readiness, with how tenants' code is jailed (`sandbox`); a server that is not ready throws a 503
   * `RunplaneError` (never retried: that is the answer).
   */
  readiness(): Promise<Schemas["Readiness"]>;
  /** The Prometheus metrics text. */
  metrics(): Promise<string>;
}

/**
 * Creates a client. Throws a `TypeError` when neither `baseUrl` nor `apiUrl` is given. The token is
 * sent on every call; calls that need none (`health`, `jwks`, ...) ignore it.
 *
 * Retries are safe by default: a call that can do no harm twice (a GET, or a run with an
 * `Idempotency-Key`, which `runAsync` always sends) is sent once more, with the same key, when its
 * connection broke before the answer or the server answered 503 (after `Retry-After`, at most 5 s). A sync
 * or stream run without a key is never retried: its first attempt may be running already.
 */
export function createRunplaneClient(options: RunplaneClientOptions): RunplaneClient {
  // Each group of calls is a small class over the state they share; the client is their methods, bound,
  // so that a method taken off it (`const { run } = client`) works as it did when they were closures.
  const client = createClientContext(options);
  const calls = new FunctionCalls(client);
  const runs = new Runs(client);
  const logs = new RunLogs(client);
  const insights = new AppInsights(client);
  const build = new BuildSupport(client);
  const deployments = new Deployments(client);
  const apps = new Apps(client);
  const accounts = new ServiceAccounts(client);
  const secrets = new ProjectSecrets(client);
  const server = new ServerInfo(client);
  const sockets = new WebSockets(client, options.apiUrl ?? options.baseUrl ?? "");
  const volumes = new VolumesClient({
    baseUrl: options.baseUrl ?? options.apiUrl ?? "",
    token: options.token,
    fetch: options.fetch,
  });
  return {
    api: client.api,
    runApi: client.runApi,
    volumes,
    run: calls.run.bind(calls),
    runAsync: calls.runAsync.bind(calls),
    stream: calls.stream.bind(calls),
    getRun: runs.getRun.bind(runs),
    waitForRun: runs.waitForRun.bind(runs),
    listRuns: runs.listRuns.bind(runs),
    connect: sockets.connect.bind(sockets),
    listProjectRuns: runs.listProjectRuns.bind(runs),
    cancelRun: runs.cancelRun.bind(runs),
    runLogs: logs.runLogs.bind(logs),
    followRunLogs: logs.followRunLogs.bind(logs),
    appLogs: insights.appLogs.bind(insights),
    followAppLogs: insights.followAppLogs.bind(insights),
    appStats: insights.appStats.bind(insights),
    watchRuns: runs.watchRuns.bind(runs),
    redeliverWebhook: runs.redeliverWebhook.bind(runs),
    baseImageHash: build.baseImageHash.bind(build),
    repositoryTree: build.repositoryTree.bind(build),
    createDeployment: deployments.createDeployment.bind(deployments),
    getDeployment: deployments.getDeployment.bind(deployments),
    listDeployments: deployments.listDeployments.bind(deployments),
    activateDeployment: deployments.activateDeployment.bind(deployments),
    deploymentLogs: deployments.deploymentLogs.bind(deployments),
    followDeploymentLogs: deployments.followDeploymentLogs.bind(deployments),
    listApps: apps.listApps.bind(apps),
    getApp: apps.getApp.bind(apps),
    deleteApp: apps.deleteApp.bind(apps),
    createServiceAccount: accounts.createServiceAccount.bind(accounts),
    listServiceAccounts: accounts.listServiceAccounts.bind(accounts),
    revokeServiceAccount: accounts.revokeServiceAccount.bind(accounts),
    listProjectSecrets: secrets.listProjectSecrets.bind(secrets),
    setProjectSecret: secrets.setProjectSecret.bind(secrets),
    deleteProjectSecret: secrets.deleteProjectSecret.bind(secrets),
    jwks: server.jwks.bind(server),
    health: server.health.bind(server),
    readiness: server.readiness.bind(server),
    metrics: server.metrics.bind(server),
  };
}
