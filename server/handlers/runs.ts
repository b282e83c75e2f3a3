import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";

type RunHandlers = Pick<Handlers, "runFunction" | "getRun" | "cancelRun" | "listRuns">;

function notYet(operation: string): never {
  throw new ProblemError("not-implemented", `${operation} is not implemented on this server yet`);
}

/** The run API: calling functions and inspecting runs. */
export function runHandlers(_context: ServerContext): RunHandlers {
  return {
    runFunction: () => Promise.resolve(notYet("runFunction")),
    getRun: () => Promise.resolve(notYet("getRun")),
    cancelRun: () => Promise.resolve(notYet("cancelRun")),
    listRuns: () => Promise.resolve(notYet("listRuns")),
  };
}
