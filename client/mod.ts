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
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "../generated/api.d.ts";
import { type AppLocation, type AppRef, resolveAppRef } from "./app_ref.ts";
import { readEventStream, readServerEvents } from "./event_stream.ts";
import { errorFromResponse, RunplaneError, runIdFrom } from "./runplane_error.ts";
import { retryingFetch, type RunplaneFetch } from "./safe_retry.ts";
import { sleep } from "./sleep.ts";

export type { components, paths } from "../generated/api.d.ts";
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
  mode?: "sync" | "async" | "stream";
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

/** How many run ids (and their apps) a client remembers for `getRun(runId)`. */
const MAX_KNOWN_RUNS = 10_000;

/** The run statuses after which a run never changes. */
export const TERMINAL_STATUSES: readonly RunStatus[] = ["success", "failure", "cancelled"];

/** The client `createRunplaneClient` returns. */
export interface RunplaneClient {
  /** openapi-fetch on the REST API, for calls this wrapper does not cover. */
  readonly api: Client<paths>;
  /** openapi-fetch on the run API. */
  readonly runApi: Client<paths>;
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
  /** A page of a project's runs across all its apps, newest first, filtered (`listProjectRuns`). */
  listProjectRuns(project: string, options?: ListProjectRunsOptions): Promise<RunPage>;
  /** Cancels a queued or running run; resolves with its record. Takes the run id alone like `getRun`. */
  cancelRun(runId: string, options?: RunCallOptions): Promise<Run>;
  cancelRun(app: AppRef, runId: string, options?: RunCallOptions): Promise<Run>;
  /** A run's captured output so far (its function's stdout, stderr and `logging`). */
  runLogs(app: AppRef, runId: string, options?: RunCallOptions): Promise<RunLog>;
  /** Follows a run's output line by line until the run ends, then yields its final status. */
  followRunLogs(app: AppRef, runId: string, options?: RunCallOptions): AsyncIterable<RunLogEvent>;
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

/** `bytes` as a stream of 256 KiB chunks, reporting each one as the connection pulls it. */
function uploadStream(
  bytes: Uint8Array,
  onProgress: (sent: number, total: number) => void,
): ReadableStream<Uint8Array> {
  const CHUNK = 256 * 1024;
  let sent = 0;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= bytes.length) return controller.close();
      const chunk = bytes.subarray(sent, sent + CHUNK);
      sent += chunk.length;
      controller.enqueue(chunk);
      onProgress(sent, bytes.length);
    },
  });
}

/** The result of an openapi-fetch call, reduced to what `unwrap` needs. */
interface FetchOutcome<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

async function unwrap<T>(call: Promise<FetchOutcome<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw await errorFromResponse(response, error);
  return data as T;
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
  const restUrl = options.baseUrl ?? options.apiUrl;
  const runUrl = options.apiUrl ?? options.baseUrl;
  if (!runUrl || !restUrl) throw new TypeError("Give the client a baseUrl (REST API) or an apiUrl (run API), or both");
  const headers: Record<string, string> = options.token ? { Authorization: `Bearer ${options.token}` } : {};
  const send: RunplaneFetch = options.fetch ?? ((request) => globalThis.fetch(request));
  const api = createClient<paths>({ baseUrl: restUrl, headers, fetch: retryingFetch(send) });
  const runApi = createClient<paths>({ baseUrl: runUrl, headers, fetch: retryingFetch(send) });

  // The app of each run id this client saw, so `getRun(runId)` works without the app. Oldest first
  // (a Map keeps insertion order), capped so a long-lived service does not grow it without bound.
  const knownRuns = new Map<string, AppLocation>();
  function remember(runId: string | undefined, app: AppRef): void {
    if (!runId) return;
    const { project, app: name } = resolveAppRef(app);
    knownRuns.delete(runId);
    knownRuns.set(runId, { project, app: name });
    if (knownRuns.size > MAX_KNOWN_RUNS) knownRuns.delete(knownRuns.keys().next().value!);
  }

  /** Remembers the run a failed call created (a function that raised has one) and returns the error. */
  function failed(app: AppRef, error: RunplaneError): RunplaneError {
    remember(error.runId, app);
    return error;
  }

  function callFunction(
    app: AppRef,
    input: Record<string, unknown> | undefined,
    options: RunOptions,
    call: { async?: boolean; accept?: string },
  ) {
    const ref = resolveAppRef(app);
    return runApi.POST("/v4/{project_id}/{app_name}/{function_name}", {
      params: {
        path: { project_id: ref.project, app_name: ref.app, function_name: ref.function },
        query: {
          ...(call.async ? { async: true } : {}),
          ...(options.webhookEndpoint ? { webhookEndpoint: options.webhookEndpoint } : {}),
          ...(options.rerunOf ? { rerunOf: options.rerunOf } : {}),
        },
        header: {
          ...(call.accept ? { accept: call.accept } : {}),
          ...(options.webhookSecret ? { "X-Webhook-Secret": options.webhookSecret } : {}),
          ...(options.idempotencyKey ? { "Idempotency-Key": options.idempotencyKey } : {}),
        },
      },
      // The generated RunInput is Record<string, never> (openapi-typescript does not read the schema's
      // `unevaluatedProperties: {}`); any JSON object is a valid input.
      body: (input ?? {}) as Schemas["RunInput"],
      parseAs: "stream",
      signal: options.signal,
    });
  }

  function isEventStream(response: Response): boolean {
    return (response.headers.get("content-type") ?? "").startsWith("text/event-stream");
  }

  async function run(app: AppRef, input?: Record<string, unknown>, runOptions: RunOptions = {}): Promise<RunResult> {
    const started = performance.now();
    const { response, error } = await callFunction(app, input, runOptions, {});
    if (!response.ok) throw failed(app, await errorFromResponse(response, error));
    if (!isEventStream(response) || !response.body) {
      const answer = (await response.json()) as RunResult;
      remember(answer.run_id, app);
      return answer;
    }
    const runId = runIdFrom(response.headers.get("x-request-id"));
    remember(runId, app);
    const items: unknown[] = [];
    for await (const item of readEventStream(response.body, { runId })) items.push(item);
    // A stream's answer has no run_time_ms; the client's own wall time is the closest honest figure.
    return { run_id: runId ?? "", run_time_ms: performance.now() - started, result: items };
  }

  async function runAsync(app: AppRef, input?: Record<string, unknown>, runOptions: RunOptions = {}): Promise<string> {
    // A fresh key makes the submission safe to send again: a retry answers with the run the first made.
    const idempotencyKey = runOptions.idempotencyKey ?? crypto.randomUUID();
    const { response, error } = await callFunction(app, input, { ...runOptions, idempotencyKey }, { async: true });
    if (!response.ok) throw failed(app, await errorFromResponse(response, error));
    const body = (await response.json()) as { run_id: string };
    remember(body.run_id, app);
    return body.run_id;
  }

  function stream(app: AppRef, input?: Record<string, unknown>, runOptions: RunOptions = {}): RunStream {
    let runId: string | undefined;
    async function* items(): AsyncGenerator<unknown, void, undefined> {
      const { response, error } = await callFunction(app, input, runOptions, { accept: "text/event-stream" });
      runId = runIdFrom(response.headers.get("x-request-id"));
      remember(runId, app);
      if (!response.ok) throw await errorFromResponse(response, error);
      if (!isEventStream(response) || !response.body) {
        // The function returned a plain value: it is the stream's only item.
        yield ((await response.json()) as RunResult).result;
        return;
      }
      yield* readEventStream(response.body, { runId });
    }
    return {
      get runId() {
        return runId;
      },
      [Symbol.asyncIterator]: () => items(),
    };
  }

  /** Sorts a call's arguments out: `(runId, options?)` or `(app, runId, options?)`. */
  function runTarget<O extends object>(
    method: string,
    first: AppRef,
    second: string | O | undefined,
    third: O | undefined,
  ) {
    if (typeof second === "string") return { app: first, runId: second, options: third ?? ({} as O) };
    if (typeof first !== "string") {
      throw new TypeError(`${method} needs the run id: ${method}(runId) or ${method}(app, runId)`);
    }
    const app = knownRuns.get(first);
    if (!app) {
      throw new TypeError(
        `This client did not start run ${first}, so it does not know its app: call ${method}("<project>/<app>", "${first}")`,
      );
    }
    return { app: app as AppRef, runId: first, options: second ?? ({} as O) };
  }

  function runPath(app: AppRef, runId: string) {
    const ref = resolveAppRef(app);
    return { path: { project_id: ref.project, app_id: ref.app, run_id: runId } };
  }

  async function getRun(first: AppRef, second?: string | RunCallOptions, third?: RunCallOptions): Promise<Run> {
    const { app, runId, options: callOptions } = runTarget("getRun", first, second, third);
    return await unwrap(
      api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: runPath(app, runId),
        signal: callOptions.signal,
      }),
    );
  }

  async function waitForRun(
    first: AppRef,
    second?: string | WaitForRunOptions,
    third?: WaitForRunOptions,
  ): Promise<Run> {
    const { app, runId, options: waitOptions } = runTarget("waitForRun", first, second, third);
    const deadline = waitOptions.timeoutMs === undefined ? Infinity : Date.now() + waitOptions.timeoutMs;
    let delay = waitOptions.initialDelayMs ?? 200;
    const maxDelay = waitOptions.maxDelayMs ?? 2000;
    while (true) {
      const record = await getRun(app, runId, { signal: waitOptions.signal });
      waitOptions.onPoll?.(record);
      if (TERMINAL_STATUSES.includes(record.status)) return record;
      if (Date.now() + delay > deadline) {
        throw new RunplaneError({
          type: "about:blank",
          title: "Gave up waiting for the run",
          status: 504,
          detail:
            `Run ${runId} was still ${record.status} after ${waitOptions.timeoutMs} ms; wait longer or check it later with getRun`,
          run_id: runId,
        });
      }
      await sleep(delay, waitOptions.signal);
      delay = Math.min(maxDelay, delay * 1.5);
    }
  }

  async function listRuns(app: AppRef, listOptions: ListRunsOptions = {}): Promise<RunPage> {
    const ref = resolveAppRef(app);
    const { signal, ...query } = listOptions;
    const page = await unwrap(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
      params: { path: { project_id: ref.project, app_id: ref.app }, query },
      signal,
    }));
    for (const record of page.runs) remember(record.run_id, { project: record.project_id, app: record.app_id });
    return page;
  }

  async function listProjectRuns(project: string, listOptions: ListProjectRunsOptions = {}): Promise<RunPage> {
    const { signal, app, functionName, createdAfter, createdBefore, ...rest } = listOptions;
    const query = {
      ...rest,
      app_id: app,
      function_name: functionName,
      created_after: createdAfter,
      created_before: createdBefore,
    };
    const page = await unwrap(api.GET("/v4/projects/{project_id}/runs", {
      params: { path: { project_id: project }, query },
      signal,
    }));
    for (const record of page.runs) remember(record.run_id, { project: record.project_id, app: record.app_id });
    return page;
  }

  async function cancelRun(first: AppRef, second?: string | RunCallOptions, third?: RunCallOptions): Promise<Run> {
    const { app, runId, options: callOptions } = runTarget("cancelRun", first, second, third);
    return await unwrap(
      api.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: runPath(app, runId),
        signal: callOptions.signal,
      }),
    );
  }

  const runRecords = {
    runLogs(app: AppRef, runId: string, call: RunCallOptions = {}) {
      return unwrap(api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
        params: { ...runPath(app, runId), header: { accept: "application/json" } },
        signal: call.signal,
      })) as Promise<RunLog>;
    },
    async *followRunLogs(app: AppRef, runId: string, call: RunCallOptions = {}) {
      const { response, error } = await api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
        params: { ...runPath(app, runId), header: { accept: "text/event-stream" } },
        parseAs: "stream",
        signal: call.signal,
      });
      if (!response.ok || !response.body) throw await errorFromResponse(response, error);
      for await (const { event, data } of readServerEvents(response.body)) {
        if (event === "end") {
          yield { end: JSON.parse(data) as RunLogEnd } satisfies RunLogEvent;
          return;
        }
        if (event === "message") yield { line: JSON.parse(data) as RunLogLine } satisfies RunLogEvent;
      }
    },
    async *watchRuns(project: string, call: RunCallOptions = {}) {
      const { response, error } = await api.GET("/v4/projects/{project_id}/runs/events", {
        params: { path: { project_id: project } },
        parseAs: "stream",
        signal: call.signal,
      });
      if (!response.ok || !response.body) throw await errorFromResponse(response, error);
      for await (const { event, data } of readServerEvents(response.body)) {
        if (event === "resync") yield { resync: true } satisfies RunChangeEvent;
        else if (event === "message") yield { change: JSON.parse(data) as RunChange } satisfies RunChangeEvent;
      }
    },
    redeliverWebhook(app: AppRef, runId: string, call: RunCallOptions = {}) {
      return unwrap(api.POST("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver", {
        params: runPath(app, runId),
        signal: call.signal,
      }));
    },
  };

  function baseImageHash(
    app: AppRef,
    request: BaseImageRequest,
    callOptions: { signal?: AbortSignal } = {},
  ): Promise<BaseImageHash> {
    const ref = resolveAppRef(app);
    return unwrap(api.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
      params: { path: { project_id: ref.project, app_id: ref.app } },
      body: request,
      signal: callOptions.signal,
    }));
  }

  function appPath(app: AppRef) {
    const ref = resolveAppRef(app);
    return { project_id: ref.project, app_id: ref.app };
  }

  function deploymentPath(app: AppRef, deploymentId: string) {
    return { ...appPath(app), deployment_id: deploymentId };
  }

  const deployments = {
    createDeployment(
      app: AppRef,
      body: Uint8Array | { source: DeploymentSource },
      call: CreateDeploymentOptions = {},
    ) {
      const query = { message: call.message, commit: call.commit, dirty: call.dirty };
      const params = { path: appPath(app), query };
      if (!(body instanceof Uint8Array)) {
        return unwrap(api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments", {
          params,
          body,
          headers: { "Content-Type": "application/json" },
          signal: call.signal,
        }));
      }
      const progress = call.onUploadProgress;
      return unwrap(api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments", {
        params,
        // The bytes go as they are (or as a stream that reports how much was taken, for a progress bar).
        body,
        bodySerializer: (bytes: unknown) =>
          progress ? uploadStream(bytes as Uint8Array, progress) : (bytes as BodyInit),
        // fetch sets a byte body's Content-Length itself; a stream's is named here so the server still gets
        // a length (no chunked upload). A second Content-Length beside fetch's own is refused by undici 7
        // when it is the dispatcher of Node 20's fetch, as it is once the npm undici package is loaded.
        headers: progress
          ? { "Content-Type": "application/gzip", "Content-Length": String(body.length) }
          : { "Content-Type": "application/gzip" },
        signal: call.signal,
        ...(progress ? { duplex: "half" } : {}),
      }));
    },
    getDeployment(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}) {
      return unwrap(api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}", {
        params: { path: deploymentPath(app, deploymentId) },
        signal: call.signal,
      }));
    },
    listDeployments(app: AppRef, call: { limit?: number; cursor?: string; signal?: AbortSignal } = {}) {
      return unwrap(api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments", {
        params: { path: appPath(app), query: { limit: call.limit, cursor: call.cursor } },
        signal: call.signal,
      }));
    },
    activateDeployment(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}) {
      return unwrap(api.POST("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/activate", {
        params: { path: deploymentPath(app, deploymentId) },
        signal: call.signal,
      }));
    },
    deploymentLogs(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}) {
      return unwrap(api.GET("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/logs", {
        params: { path: deploymentPath(app, deploymentId), header: { accept: "text/plain" } },
        parseAs: "text",
        signal: call.signal,
      })) as Promise<string>;
    },
    async *followDeploymentLogs(app: AppRef, deploymentId: string, call: { signal?: AbortSignal } = {}) {
      const { response, error } = await api.GET(
        "/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}/logs",
        {
          params: { path: deploymentPath(app, deploymentId), header: { accept: "text/event-stream" } },
          parseAs: "stream",
          signal: call.signal,
        },
      );
      if (!response.ok || !response.body) throw await errorFromResponse(response, error);
      for await (const { event, data } of readServerEvents(response.body)) {
        if (event === "end") {
          yield { end: JSON.parse(data) as Deployment } satisfies BuildLogEvent;
          return;
        }
        if (event === "message") yield { line: data } satisfies BuildLogEvent;
      }
    },
    async listApps(project: string, call: { signal?: AbortSignal } = {}) {
      const page = await unwrap(api.GET("/v3/projects/{project_id}/apps", {
        params: { path: { project_id: project } },
        signal: call.signal,
      }));
      return page.apps;
    },
    getApp(app: AppRef, call: { signal?: AbortSignal } = {}) {
      return unwrap(api.GET("/v3/projects/{project_id}/apps/{app_id}", {
        params: { path: appPath(app) },
        signal: call.signal,
      }));
    },
    async deleteApp(app: AppRef, call: { signal?: AbortSignal } = {}) {
      await unwrap(api.DELETE("/v3/projects/{project_id}/apps/{app_id}", {
        params: { path: appPath(app) },
        signal: call.signal,
      }));
    },
  };

  const serviceAccounts = {
    createServiceAccount(project: string, request: ServiceAccountRequest, call: { signal?: AbortSignal } = {}) {
      return unwrap(api.POST("/v3/projects/{project_id}/service-accounts", {
        params: { path: { project_id: project } },
        body: request,
        signal: call.signal,
      }));
    },
    async listServiceAccounts(project: string, call: { signal?: AbortSignal } = {}) {
      const list = await unwrap(api.GET("/v3/projects/{project_id}/service-accounts", {
        params: { path: { project_id: project } },
        signal: call.signal,
      }));
      return list.service_accounts;
    },
    async revokeServiceAccount(project: string, serviceAccountId: string, call: { signal?: AbortSignal } = {}) {
      await unwrap(api.DELETE("/v3/projects/{project_id}/service-accounts/{service_account_id}", {
        params: { path: { project_id: project, service_account_id: serviceAccountId } },
        signal: call.signal,
      }));
    },
  };

  const projectSecrets = {
    async listProjectSecrets(project: string, call: { signal?: AbortSignal } = {}) {
      const list = await unwrap(api.GET("/v3/projects/{project_id}/secrets", {
        params: { path: { project_id: project } },
        signal: call.signal,
      }));
      return list.secrets;
    },
    async setProjectSecret(
      project: string,
      secret: { name: string; value: string },
      call: { signal?: AbortSignal } = {},
    ) {
      const { data, error, response } = await api.PUT("/v3/projects/{project_id}/secrets/{name}", {
        params: { path: { project_id: project, name: secret.name } },
        body: { value: secret.value },
        signal: call.signal,
      });
      if (!response.ok || !data) throw await errorFromResponse(response, error);
      return { created: response.status === 201, secret: data };
    },
    async deleteProjectSecret(project: string, name: string, call: { signal?: AbortSignal } = {}) {
      await unwrap(api.DELETE("/v3/projects/{project_id}/secrets/{name}", {
        params: { path: { project_id: project, name } },
        signal: call.signal,
      }));
    },
  };

  async function repositoryTree(
    project: string,
    repository: string,
    treeOptions: RepositoryTreeOptions = {},
  ): Promise<RepositoryTreeResult> {
    const [owner, repo, ...rest] = repository.split("/");
    if (!owner || !repo || rest.length) throw new TypeError(`Invalid repository "${repository}": write <owner>/<repo>`);
    const { data, error, response } = await api.GET(
      "/v4/projects/{project_id}/integrations/github/repos/{owner}/{repo}/tree",
      {
        params: {
          path: { project_id: project, owner, repo },
          query: treeOptions.ref ? { ref: treeOptions.ref } : {},
          header: treeOptions.ifNoneMatch ? { "If-None-Match": treeOptions.ifNoneMatch } : {},
        },
        signal: treeOptions.signal,
      },
    );
    const etag = response.headers.get("etag") ?? "";
    if (response.status === 304) return { notModified: true, etag };
    if (!response.ok || !data) throw await errorFromResponse(response, error);
    return { notModified: false, etag, tree: data };
  }

  return {
    api,
    runApi,
    run,
    runAsync,
    stream,
    getRun,
    waitForRun,
    listRuns,
    listProjectRuns,
    cancelRun,
    ...runRecords,
    baseImageHash,
    repositoryTree,
    ...deployments,
    ...serviceAccounts,
    ...projectSecrets,
    jwks: () => unwrap(api.GET("/.well-known/jwks.json")),
    health: () => unwrap(api.GET("/healthz")),
    // A 503 is readiness's answer (not ready), not a failure to retry past.
    readiness: () => unwrap(api.GET("/readyz", { fetch: send })),
    metrics: () => unwrap(api.GET("/metrics", { parseAs: "text" })),
  };
}
