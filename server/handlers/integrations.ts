import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";

type IntegrationHandlers = Pick<Handlers, "getRepositoryTree">;

/** Source-repository integrations. */
export function integrationHandlers(_context: ServerContext): IntegrationHandlers {
  return {
    getRepositoryTree: () => Promise.reject(new ProblemError("not-implemented", "getRepositoryTree is not implemented on this server yet")),
  };
}
