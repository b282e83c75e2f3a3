/** An app's log tail (every run's lines, interleaved) and its activity over time, on the REST API. */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { appPath } from "./_paths.ts";
import type { AppRef } from "./app_ref.ts";
import { readServerEvents } from "./event_stream.ts";
import { errorFromResponse } from "./runplane_error.ts";
import type { AppLogLine, AppLogOptions, AppLogPage, AppStats, AppStatsOptions, RunCallOptions } from "./types.ts";

/** The app-insight calls of a client. */
export class AppInsights {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** A page of the app's lines, every run's interleaved, from `since` (an hour ago by default) or after `cursor`. */
  appLogs(app: AppRef, options: AppLogOptions = {}): Promise<AppLogPage> {
    const { since, cursor, limit, signal } = options;
    return unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}/logs", {
      params: {
        path: appPath(app),
        query: { since: since === undefined ? undefined : new Date(since).toISOString(), cursor, limit },
        header: { accept: "application/json" },
      },
      signal,
    })) as Promise<AppLogPage>;
  }

  /** The app's lines from `since` on, then each line any run writes, until `signal` aborts or the server ends the stream. */
  async *followAppLogs(
    app: AppRef,
    options: Pick<AppLogOptions, "since"> & RunCallOptions = {},
  ): AsyncGenerator<AppLogLine, void, undefined> {
    const { since, signal } = options;
    const { response, error } = await this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}/logs", {
      params: {
        path: appPath(app),
        query: { since: since === undefined ? undefined : new Date(since).toISOString() },
        header: { accept: "text/event-stream" },
      },
      parseAs: "stream",
      signal,
    });
    if (!response.ok || !response.body) throw await errorFromResponse(response, error);
    for await (const { event, data } of readServerEvents(response.body)) {
      if (event === "message") yield JSON.parse(data) as AppLogLine;
    }
  }

  /** The app's runs by outcome, p50/p95 run time, cold starts and replicas per bucket of the last hour or day. */
  appStats(app: AppRef, options: AppStatsOptions = {}): Promise<AppStats> {
    return unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}/stats", {
      params: { path: appPath(app), query: { window: options.window ?? "1h" } },
      signal: options.signal,
    })) as Promise<AppStats>;
  }
}
