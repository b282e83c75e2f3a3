/**
 * What every call of a client shares: openapi-fetch on the REST API and on the run API, the caller's own
 * fetch, and the run ids the client has seen. `unwrap` turns an openapi-fetch answer into its data or a
 * `RunplaneError`.
 */
import createClient, { type Client } from "openapi-fetch";
import type { paths } from "../generated/api.d.ts";
import { KnownRuns } from "./_known_runs.ts";
import { errorFromResponse } from "./runplane_error.ts";
import { retryingFetch, type RunplaneFetch } from "./safe_retry.ts";
import type { RunplaneClientOptions } from "./types.ts";

/** The state one client's calls share; made once by `createClientContext`. */
export interface ClientContext {
  /** openapi-fetch on the REST API, with safe retries. */
  readonly api: Client<paths>;
  /** openapi-fetch on the run API, with safe retries. */
  readonly runApi: Client<paths>;
  /** The fetch without retries, for an answer that must not be retried past (readiness's 503). */
  readonly send: RunplaneFetch;
  /** The app of each run id the client saw, so that `getRun(runId)` works without the app. */
  readonly knownRuns: KnownRuns;
}

/**
 * The shared state of a client made with `options`. Throws a `TypeError` when neither `baseUrl` nor
 * `apiUrl` is given; the token goes on every call.
 */
export function createClientContext(options: RunplaneClientOptions): ClientContext {
  const restUrl = options.baseUrl ?? options.apiUrl;
  const runUrl = options.apiUrl ?? options.baseUrl;
  if (!runUrl || !restUrl) throw new TypeError("Give the client a baseUrl (REST API) or an apiUrl (run API), or both");
  const headers: Record<string, string> = options.token ? { Authorization: `Bearer ${options.token}` } : {};
  const send: RunplaneFetch = options.fetch ?? ((request) => globalThis.fetch(request));
  const api = createClient<paths>({ baseUrl: restUrl, headers, fetch: retryingFetch(send) });
  const runApi = createClient<paths>({ baseUrl: runUrl, headers, fetch: retryingFetch(send) });
  return { api, runApi, send, knownRuns: new KnownRuns() };
}

/** The result of an openapi-fetch call, reduced to what `unwrap` needs. */
export interface FetchOutcome<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** The data of a successful openapi-fetch call; a failed one rejects with its `RunplaneError`. */
export async function unwrap<T>(call: Promise<FetchOutcome<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw await errorFromResponse(response, error);
  return data as T;
}
