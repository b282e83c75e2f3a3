/**
 * Run calls over HTTP for tests, through a validating client: call a function (sync or async, with a
 * webhook and an idempotency key), read, list and cancel runs, and wait for a run's status.
 */
import type { components } from "../../generated/api.d.ts";
import type { TestClient } from "./client.ts";
import { eventually } from "./webhook_receiver.ts";

/** The contract's `Run`. */
export type Run = components["schemas"]["Run"];

/** Which app a call goes to. */
export interface AppRef {
  client: TestClient;
  project: string;
  app: string;
}

/** Options of `callRun`. */
export interface CallRunOptions {
  async?: boolean;
  webhookEndpoint?: string;
  webhookSecret?: string;
  idempotencyKey?: string;
}

/** Calls `fn` with `body`; the answer as the client gives it (202 `{run_id}`, 200 result, or a problem). */
export function callRun(ref: AppRef, fn: string, options: CallRunOptions & { body?: Record<string, unknown> } = {}) {
  const header: Record<string, string> = {};
  if (options.idempotencyKey) header["Idempotency-Key"] = options.idempotencyKey;
  if (options.webhookSecret) header["X-Webhook-Secret"] = options.webhookSecret;
  return ref.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
    params: {
      path: { project_id: ref.project, app_name: ref.app, function_name: fn },
      query: { async: options.async, webhookEndpoint: options.webhookEndpoint },
      header,
    },
    // The generated type of a free-form object is `Record<string, never>`.
    body: (options.body ?? {}) as Record<string, never>,
  });
}

/** Calls `fn` with `async=true` and returns the run id of the 202; throws on any other answer. */
export async function submitAsync(
  ref: AppRef,
  fn: string,
  options: Omit<CallRunOptions, "async"> & { body?: Record<string, unknown> } = {},
): Promise<string> {
  const { data, response } = await callRun(ref, fn, { ...options, async: true });
  const runId = (data as { run_id?: string } | undefined)?.run_id;
  if (response.status !== 202 || !runId) {
    throw new Error(`Expected 202 for an async call of ${fn}, got ${response.status}`);
  }
  return runId;
}

/** `getRun`. */
export function getRun(ref: AppRef, runId: string) {
  return ref.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
    params: { path: { project_id: ref.project, app_id: ref.app, run_id: runId } },
  });
}

/** `cancelRun`. */
export function cancelRun(ref: AppRef, runId: string) {
  return ref.client.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
    params: { path: { project_id: ref.project, app_id: ref.app, run_id: runId } },
  });
}

/** `listRuns`. */
export function listRuns(ref: AppRef, query: { status?: Run["status"]; limit?: number; cursor?: string } = {}) {
  return ref.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
    params: { path: { project_id: ref.project, app_id: ref.app }, query },
  });
}

/** Polls `getRun` until the run is in one of `statuses`; returns it. */
export function waitForStatus(
  ref: AppRef,
  runId: string,
  statuses: Array<Run["status"]>,
  timeoutMs = 30_000,
): Promise<Run> {
  return eventually(
    async () => {
      const { data } = await getRun(ref, runId);
      return data && statuses.includes(data.status) ? data : undefined;
    },
    timeoutMs,
    `${runId} to reach ${statuses.join("/")}`,
  );
}

/** The statuses a run ends in. */
export const TERMINAL: Array<Run["status"]> = ["success", "failure", "cancelled"];

/** What `promise` rejects with; fails the test when it resolves. */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a rejection; the call succeeded");
}
