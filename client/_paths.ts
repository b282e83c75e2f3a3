/** The path parameters of the REST API's app, run and deployment routes, from an `AppRef`. */
import { type AppRef, resolveAppRef } from "./app_ref.ts";

/** `{ project_id, app_id }` of `app`; throws `resolveAppRef`'s `TypeError` on a malformed reference. */
export function appPath(app: AppRef): { project_id: string; app_id: string } {
  const ref = resolveAppRef(app);
  return { project_id: ref.project, app_id: ref.app };
}

/** The `params` of a call about one run of `app`. */
export function runPath(app: AppRef, runId: string): { path: { project_id: string; app_id: string; run_id: string } } {
  return { path: { ...appPath(app), run_id: runId } };
}

/** The path of one deployment of `app`. */
export function deploymentPath(
  app: AppRef,
  deploymentId: string,
): { project_id: string; app_id: string; deployment_id: string } {
  return { ...appPath(app), deployment_id: deploymentId };
}
