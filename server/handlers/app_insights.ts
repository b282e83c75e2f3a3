import type { ServerContext } from "../context.ts";
import { frameEvent, type Handlers, wantsEventStream, withHeartbeat } from "../http/mod.ts";

type AppInsightHandlers = Pick<Handlers, "getAppLogs" | "getAppStats">;

/** An app's log tail (a page, or followed as server-sent events) and its activity over time. */
export function appInsightHandlers(context: ServerContext): AppInsightHandlers {
  const { runs, config } = context;
  return {
    async getAppLogs({ path, query, header, signal }) {
      const app = { projectId: path.project_id, appId: path.app_id };
      const since = query.since === undefined ? undefined : Date.parse(query.since);
      if (!wantsEventStream(header.accept)) {
        const page = await runs.getAppLog(app, { since, cursor: query.cursor, limit: query.limit });
        return { status: 200, contentType: "application/json", body: page };
      }
      const lines = runs.followAppLog(app, { since, signal });
      async function* framed(): AsyncGenerator<string> {
        for await (const line of lines) yield frameEvent(JSON.stringify(line));
      }
      return {
        status: 200,
        contentType: "text/event-stream",
        body: withHeartbeat(framed(), { intervalMs: config.sseHeartbeatMs }),
      };
    },
    async getAppStats({ path, query }) {
      const app = { projectId: path.project_id, appId: path.app_id };
      const stats = await runs.getAppStats(app, query.window ?? "1h");
      return { status: 200, contentType: "application/json", body: stats };
    },
  };
}
