/** The handler of every operation, one map checked against the contract with `satisfies`. */
import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { appInsightHandlers } from "./app_insights.ts";
import { appRouteHandlers } from "./app_routes.ts";
import { buildHandlers } from "./builds.ts";
import { deploymentHandlers } from "./deployments.ts";
import { integrationHandlers } from "./integrations.ts";
import { projectSecretHandlers } from "./project_secrets.ts";
import { runEventHandlers } from "./run_events.ts";
import { runHandlers } from "./runs.ts";
import { serviceAccountHandlers } from "./service_accounts.ts";
import { systemHandlers } from "./system.ts";
import { volumeHandlers } from "./volumes.ts";
import { webSocketHandlers } from "./websockets.ts";

/** Creates the handlers; a missing or mistyped one is a compile error. */
export function createHandlers(context: ServerContext): Handlers {
  return {
    ...runHandlers(context),
    ...appRouteHandlers(context),
    ...appInsightHandlers(context),
    ...runEventHandlers(context),
    ...buildHandlers(context),
    ...deploymentHandlers(context),
    ...integrationHandlers(context),
    ...serviceAccountHandlers(context),
    ...projectSecretHandlers(context),
    ...volumeHandlers(context),
    ...systemHandlers(context),
    ...webSocketHandlers(context),
  } satisfies Handlers;
}
