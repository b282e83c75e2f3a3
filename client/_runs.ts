/**
 * A client's calls about runs on the REST API: a run's record, waiting for its end, cancelling it,
 * delivering its webhook again, the pages of an app's or a project's runs, and following a project's runs.
 */
import { type ClientContext, unwrap } from "./_client_context.ts";
import type { RunArguments } from "./_known_runs.ts";
import { runPath } from "./_paths.ts";
import { type AppRef, resolveAppRef } from "./app_ref.ts";
import { readServerEvents } from "./event_stream.ts";
import { errorFromResponse, RunplaneError } from "./runplane_error.ts";
import { sleep } from "./sleep.ts";
import type {
  ListProjectRunsOptions,
  ListRunsOptions,
  Run,
  RunCallOptions,
  RunChange,
  RunChangeEvent,
  RunPage,
  RunStatus,
  WaitForRunOptions,
} from "./types.ts";

/** The run statuses after which a run never changes. */
export const TERMINAL_STATUSES: readonly RunStatus[] = ["success", "failure", "cancelled"];

/** The run calls of a client; a run id alone names a run whose app the client remembers. */
export class Runs {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** A run's record: `(runId, options?)` or `(app, runId, options?)`. */
  async getRun(...args: RunArguments<RunCallOptions>): Promise<Run> {
    const { app, runId, options: callOptions } = this.#client.knownRuns.target("getRun", args);
    return await unwrap(
      this.#client.api.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: runPath(app, runId),
        signal: callOptions.signal,
      }),
    );
  }

  /** Polls a run with backoff until it is terminal; rejects with a 504 `RunplaneError` past `timeoutMs`. */
  async waitForRun(...args: RunArguments<WaitForRunOptions>): Promise<Run> {
    const { app, runId, options: waitOptions } = this.#client.knownRuns.target("waitForRun", args);
    const deadline = waitOptions.timeoutMs === undefined ? Infinity : Date.now() + waitOptions.timeoutMs;
    let delay = waitOptions.initialDelayMs ?? 200;
    const maxDelay = waitOptions.maxDelayMs ?? 2000;
    while (true) {
      const record = await this.getRun(app, runId, { signal: waitOptions.signal });
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

  /** A page of an app's runs, newest first; their run ids are remembered. */
  async listRuns(app: AppRef, listOptions: ListRunsOptions = {}): Promise<RunPage> {
    const ref = resolveAppRef(app);
    const { signal, ...query } = listOptions;
    const page = await unwrap(this.#client.api.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
      params: { path: { project_id: ref.project, app_id: ref.app }, query },
      signal,
    }));
    this.#rememberPage(page);
    return page;
  }

  /** A page of a project's runs across its apps, newest first, filtered; their run ids are remembered. */
  async listProjectRuns(project: string, listOptions: ListProjectRunsOptions = {}): Promise<RunPage> {
    const { signal, app, functionName, createdAfter, createdBefore, ...rest } = listOptions;
    const query = {
      ...rest,
      app_id: app,
      function_name: functionName,
      created_after: createdAfter,
      created_before: createdBefore,
    };
    const page = await unwrap(this.#client.api.GET("/v4/projects/{project_id}/runs", {
      params: { path: { project_id: project }, query },
      signal,
    }));
    this.#rememberPage(page);
    return page;
  }

  /** Cancels a queued or running run: `(runId, options?)` or `(app, runId, options?)`. */
  async cancelRun(...args: RunArguments<RunCallOptions>): Promise<Run> {
    const { app, runId, options: callOptions } = this.#client.knownRuns.target("cancelRun", args);
    return await unwrap(
      this.#client.api.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: runPath(app, runId),
        signal: callOptions.signal,
      }),
    );
  }

  /** Follows a project's runs until `signal` aborts or the server ends the stream. */
  async *watchRuns(project: string, call: RunCallOptions = {}): AsyncGenerator<RunChangeEvent, void, undefined> {
    const { response, error } = await this.#client.api.GET("/v4/projects/{project_id}/runs/events", {
      params: { path: { project_id: project } },
      parseAs: "stream",
      signal: call.signal,
    });
    if (!response.ok || !response.body) throw await errorFromResponse(response, error);
    for await (const { event, data } of readServerEvents(response.body)) {
      if (event === "resync") yield { resync: true } satisfies RunChangeEvent;
      else if (event === "message") yield { change: JSON.parse(data) as RunChange } satisfies RunChangeEvent;
    }
  }

  /** Delivers a finished run's webhook once more; resolves with the run's record. */
  redeliverWebhook(app: AppRef, runId: string, call: RunCallOptions = {}): Promise<Run> {
    return unwrap(this.#client.api.POST("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver", {
      params: runPath(app, runId),
      signal: call.signal,
    }));
  }

  #rememberPage(page: RunPage): void {
    for (const record of page.runs) {
      this.#client.knownRuns.remember(record.run_id, { project: record.project_id, app: record.app_id });
    }
  }
}
