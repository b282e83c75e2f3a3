/** A run's captured output on the REST API: what it wrote so far, or followed line by line to its end. */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { runPath } from "./_paths.ts";
import type { AppRef } from "./app_ref.ts";
import { readServerEvents } from "./event_stream.ts";
import { errorFromResponse } from "./runplane_error.ts";
import type { RunCallOptions, RunLog, RunLogEnd, RunLogEvent, RunLogLine } from "./types.ts";

/** The run-log calls of a client. */
export class RunLogs {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** A run's captured output so far (its function's stdout, stderr and `logging`). */
  runLogs(app: AppRef, runId: string, call: RunCallOptions = {}): Promise<RunLog> {
    return unwrap(this.#client.api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
      params: { ...runPath(app, runId), header: { accept: "application/json" } },
      signal: call.signal,
    })) as Promise<RunLog>;
  }

  /** Follows a run's output line by line until the run ends, then yields its final status. */
  async *followRunLogs(
    app: AppRef,
    runId: string,
    call: RunCallOptions = {},
  ): AsyncGenerator<RunLogEvent, void, undefined> {
    const { response, error } = await this.#client.api.GET(
      "/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs",
      {
        params: { ...runPath(app, runId), header: { accept: "text/event-stream" } },
        parseAs: "stream",
        signal: call.signal,
      },
    );
    if (!response.ok || !response.body) throw await errorFromResponse(response, error);
    for await (const { event, data } of readServerEvents(response.body)) {
      if (event === "end") {
        yield { end: JSON.parse(data) as RunLogEnd } satisfies RunLogEvent;
        return;
      }
      if (event === "message") yield { line: JSON.parse(data) as RunLogLine } satisfies RunLogEvent;
    }
  }
}
