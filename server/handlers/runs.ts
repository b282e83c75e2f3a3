import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";

type RunHandlers = Pick<Handlers, "runFunction" | "getRun" | "cancelRun" | "listRuns">;

function notYet(operation: string): never {
  throw new ProblemError("not-implemented", `${operation} is not implemented on this server yet`);
}

/** The run API: calling functions and inspecting runs. */
export function runHandlers(context: ServerContext): RunHandlers {
  const { runs } = context;
  return {
    runFunction: () => Promise.resolve(notYet("runFunction")),
    async getRun({ path }) {
      const run = await runs.getRun({ projectId: path.project_id, appId: path.app_id, runId: path.run_id });
      return { status: 200, contentType: "application/json", body: run };
    },
    async cancelRun({ path }) {
      const run = await runs.cancelRun({ projectId: path.project_id, appId: path.app_id, runId: path.run_id });
      return { status: 200, contentType: "application/json", body: run };
    },
    async listRuns({ path, query }) {
      const page = await runs.listRuns({ projectId: path.project_id, appId: path.app_id }, {
        status: query.status,
        limit: query.limit,
        cursor: query.cursor,
      });
      return { status: 200, contentType: "application/json", body: page };
    },
  };
}
