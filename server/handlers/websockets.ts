import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";

type WebSocketHandlers = Pick<Handlers, "createWebSocketTicket">;

/** WebSocket tickets: one connection to one app for a caller that cannot send a header (issue 47). */
export function webSocketHandlers(context: ServerContext): WebSocketHandlers {
  return {
    async createWebSocketTicket({ path }) {
      const settings = await context.runtime.findApp(path.project_id, path.app_id);
      if (settings.runtime !== "custom") {
        throw new ProblemError(
          "bad-request",
          `${path.project_id}/${path.app_id} is a Python app, which has no WebSockets; they reach a custom runtime`,
        );
      }
      const minted = await context.websocketTickets.mint({ projectId: path.project_id, appId: path.app_id });
      if (!minted) {
        throw new ProblemError(
          "too-many-requests",
          "This project holds too many unused WebSocket tickets; use them or wait a minute",
          {
            headers: { "Retry-After": "60" },
          },
        );
      }
      return {
        status: 201,
        contentType: "application/json",
        body: { ticket: minted.ticket, expires_at: new Date(minted.expiresAt).toISOString() },
      };
    },
  };
}
