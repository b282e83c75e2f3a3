/** Placing one call on a replica of its app (`Runtime.invoke`): a slot leased or waited for, then the call. */
import { label } from "./_app_pool.ts";
import { RunFailure } from "./_failures.ts";
import type { LiveApps } from "./_live_apps.ts";
import type { CallOutcome } from "./_outcome.ts";
import { ProblemError } from "../problems/mod.ts";
import type { InvokeRequest, SlotLease } from "./_types.ts";

/**
 * A seated runtime's answer to a call of an app that holds no seat here (issue 31): the call may run on
 * another host, or here once a seat is claimed. A 503 for a caller that gets it.
 */
export class NoSeatError extends ProblemError {
  constructor(app: string) {
    super("service-unavailable", `No replica of ${app} may run on this host now; retry`, {
      headers: { "Retry-After": "1" },
    });
  }
}

/**
 * The answer to a call of a Python app by another method than POST: a function is called with POST only.
 * A 405 with `Allow: POST`.
 */
export function postOnly(method: string, app: string): ProblemError {
  return new ProblemError("method-not-allowed", `${app} is a Python app: call its functions with POST, not ${method}`, {
    headers: { Allow: "POST" },
  });
}

/** Runs `request` on a replica of its app in `apps` (see `Runtime.invoke`). */
export async function invokeApp(apps: LiveApps, request: InvokeRequest): Promise<CallOutcome> {
  const { options } = apps;
  const app = await apps.liveOrLoad(request.projectId, request.app);
  const { config } = app.version;
  if (request.http && config.runtime !== "custom") throw postOnly(request.http.method, label(app.version));
  if (options.seated && !request.lease && app.pool.limits.maxReplicas === 0) {
    throw new NoSeatError(label(app.version));
  }
  let lease: SlotLease;
  try {
    lease = request.lease ?? (await app.pool.acquire(request.signal));
  } catch (error) {
    if (request.signal?.aborted) {
      throw new RunFailure("interrupted", "The run was interrupted while it waited for a slot", {
        runId: request.runId,
      });
    }
    throw error;
  }
  try {
    await lease.replica.ready;
  } catch (error) {
    lease.release();
    if (error instanceof ProblemError) throw new ProblemError(error.kind, error.message, { runId: request.runId });
    throw error;
  }
  // The version this call's pool serves: the one it runs on, even if a newer one arrived meanwhile.
  if (app.version.deploymentId !== undefined) request.onDeployment?.(app.version.deploymentId);
  return lease.replica.call({
    runId: request.runId,
    functionName: request.functionName,
    kwargs: request.input,
    kwargsJson: request.inputJson,
    http: request.http,
    graceMs: config.responseGracePeriodMs,
    signal: request.signal,
    onSettled: () => lease.release(),
  });
}
