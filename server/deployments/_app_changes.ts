/**
 * Changes to what an app serves, told to every process at once: making a ready deployment active (a new
 * version or a rollback to an older one) and deleting a deployed app. An app of the apps folder is not
 * the store's to change.
 */
import { ProblemError } from "../problems/mod.ts";
import { appNotFound, deploymentRow, type DeploymentRef, readDeployment } from "./_deployment_views.ts";
import { activate, markAppDeleted } from "./_records.ts";
import type { DeploymentsContext } from "./_serving.ts";
import type { AppRef, DeploymentView, RuntimeView } from "./_types.ts";

/** Refuses (409) to deploy or delete an app served from the apps folder. */
export function refuseDirectoryApp(runtime: RuntimeView, ref: AppRef): void {
  const app = runtime.apps(ref.projectId).find((a) => a.name === ref.appId);
  if (app?.source === "directory") {
    throw new ProblemError(
      "conflict",
      `App ${ref.projectId}/${ref.appId} is served from the apps folder (RUNPLANE_APPS_DIR); deploy it under another name, or remove its folder first`,
    );
  }
}

/** Makes a `ready` deployment its app's active one (409 otherwise, or once the app was deleted). */
export async function activateDeployment(context: DeploymentsContext, ref: DeploymentRef): Promise<DeploymentView> {
  const { options, serving } = context;
  const found = await deploymentRow(options.db, ref);
  if (found.status !== "ready") {
    throw new ProblemError(
      "conflict",
      `Deployment ${ref.deploymentId} is ${found.status}; only a ready deployment can be activated`,
    );
  }
  if (!(await activate(options.db, ref))) {
    throw new ProblemError("conflict", `App ${ref.projectId}/${ref.appId} was deleted; deploy it again`);
  }
  options.logger.info(
    { deployment_id: ref.deploymentId, app: `${ref.projectId}/${ref.appId}` },
    "deployment activated",
  );
  await serving.announce();
  await serving.sync();
  return readDeployment(options.db, ref);
}

/** Deletes a deployed app: new calls 404 at once, calls in flight finish (409 for a directory app). */
export async function deleteApp(context: DeploymentsContext, ref: AppRef): Promise<void> {
  const { options, serving } = context;
  refuseDirectoryApp(options.runtime, ref);
  if (!(await markAppDeleted(options.db, { ...ref, now: options.now() }))) throw appNotFound(ref);
  options.logger.info({ app: `${ref.projectId}/${ref.appId}` }, "app deleted");
  await serving.announce();
  await serving.sync();
}
