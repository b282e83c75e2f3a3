import type { ServerContext } from "../context.ts";
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
    async createDeployment({ path, body }) {
      const ref = { projectId: path.project_id, appId: path.app_id };
      const deployment = body instanceof SpooledBody
        ? await deployments.deployBundle(ref, body)
        : await deployments.deployRepository(ref, body!.source);
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
        body: { apps: await deployments.listApps(path.project_id) },
      };
    },
    async getApp({ path }) {
      const app = await deployments.getApp({ projectId: path.project_id, appId: path.app_id });
      return { status: 200, contentType: "application/json", body: app };
    },
    async deleteApp({ path }) {
      await deployments.deleteApp({ projectId: path.project_id, appId: path.app_id });
      return { status: 204 };
    },
  };
}
