import { hashBaseImage } from "../builds/mod.ts";
import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";

type BuildHandlers = Pick<Handlers, "createBaseImageHash">;

/** The build-support operations of the REST API. */
export function buildHandlers(context: ServerContext): BuildHandlers {
  return {
    async createBaseImageHash({ path, body }) {
      const outcome = await hashBaseImage(context.store.db, { projectId: path.project_id, request: body ?? {} }, {
        layersReady: (request, options) => context.deployments.layersReady(request, options),
      });
      return { status: 200, contentType: "application/json", body: outcome };
    },
  };
}
