import { appHostsOf, type AppHostReplicas, localAppHosts } from "../cluster/mod.ts";
import type { ServerContext } from "../context.ts";
import { refuseUnjailedDeployments } from "../placement/mod.ts";
import type { AppView } from "../deployments/mod.ts";
import { frameEvent, type Handlers, SpooledBody, wantsEventStream, withHeartbeat } from "../http/mod.ts";

type DeploymentHandlers = Pick<
  Handlers,
  | "createDeployment"
  | "listDeployments"
  | "getDeployment"
  | "activateDeployment"
  | "getDeploymentLogs"
  | "listApps"
  | "getApp"
  | "deleteApp"
>;

/** Deployments and apps. */
export function deploymentHandlers(context: ServerContext): DeploymentHandlers {
  const { deployments } = context;
  return {
    async createDeployment({ path, query, body }) {
      refuseUnjailedDeployments(context.sandbox);
      const ref = { projectId: path.project_id, appId: path.app_id };
      const label = { message: query.message, commit: query.commit, dirty: query.dirty };
      const deployment = body instanceof SpooledBody
        ? await deployments.deployBundle(ref, body, label)
        : await deployments.deployRepository(ref, body!.source, label);
      return {
        status: 202,
        contentType: "application/json",
        headers: {
          Location: `/v3/projects/${path.project_id}/apps/${path.app_id}/deployments/${deployment.deployment_id}`,
        },
        body: deployment,
      };
    },
    async listDeployments({ path, query }) {
      const page = await deployments.list({ projectId: path.project_id, appId: path.app_id }, {
        limit: query.limit ?? 50,
        cursor: query.cursor,
      });
      return { status: 200, contentType: "application/json", body: page };
    },
    async getDeployment({ path }) {
      const deployment = await deployments.get({
        projectId: path.project_id,
        appId: path.app_id,
        deploymentId: path.deployment_id,
      });
      return { status: 200, contentType: "application/json", body: deployment };
    },
    async activateDeployment({ path }) {
      const deployment = await deployments.activate({
        projectId: path.project_id,
        appId: path.app_id,
        deploymentId: path.deployment_id,
      });
      return { status: 200, contentType: "application/json", body: deployment };
    },
    async getDeploymentLogs({ path, header, signal }) {
      const ref = { projectId: path.project_id, appId: path.app_id, deploymentId: path.deployment_id };
      if (!wantsEventStream(header.accept)) {
        return { status: 200, contentType: "text/plain", body: await deployments.logText(ref) };
      }
      const events = await deployments.followLogs(ref, signal);
      async function* frames(): AsyncGenerator<string> {
        for await (const event of events) {
          yield "line" in event ? frameEvent(event.line) : frameEvent(JSON.stringify(event.end), { event: "end" });
        }
      }
      return {
        status: 200,
        contentType: "text/event-stream",
        body: withHeartbeat(frames(), { intervalMs: context.config.sseHeartbeatMs }),
      };
    },
    async listApps({ path }) {
      return {
        status: 200,
        contentType: "application/json",
        body: { apps: (await deployments.listApps(path.project_id)).map((app) => withHosts(context, app)) },
      };
    },
    async getApp({ path }) {
      const app = await deployments.getApp({ projectId: path.project_id, appId: path.app_id });
      return { status: 200, contentType: "application/json", body: withHosts(context, app) };
    },
    async deleteApp({ path }) {
      await deployments.deleteApp({ projectId: path.project_id, appId: path.app_id });
      return { status: 204 };
    },
  };
}

/** `app` with its replicas per host: from the cluster's cached view, or this process alone without a cluster. */
function withHosts(context: ServerContext, app: AppView): AppView & { replicas: { hosts: AppHostReplicas[] } } {
  return { ...app, replicas: { ...app.replicas, hosts: hostsOf(context, app) } };
}

function hostsOf(context: ServerContext, app: AppView): AppHostReplicas[] {
  const request = { projectId: app.project_id, appId: app.app_id, hostId: context.host.id };
  if (context.cluster) return appHostsOf(context.cluster.view(), request);
  const { starting, idle, busy } = app.replicas;
  if (starting + idle + busy === 0) return [];
  return localAppHosts({
    hostId: context.host.id,
    url: context.host.url,
    starting,
    ready: idle + busy,
    busy: callsInFlight(context, app),
    replicaConcurrency: app.scaling?.replica_concurrency ?? 1,
    hostGpus: context.gpus.gpus.length,
  });
}

/** Calls running on this process's replicas of the app (its served version's; 0 when it does not load). */
function callsInFlight(context: ServerContext, app: AppView): number {
  try {
    return context.runtime.capacity(app.project_id, app.app_id).busy;
  } catch {
    return 0;
  }
}
