/**
 * Calls of a custom runtime's routes by the other HTTP methods (`callAppGet`, `callAppHead`, …): each a
 * sync run whose answer is the app's, passed through (status, headers, body as it comes).
 */
import type { ServerContext } from "../context.ts";
import { type HandlerInput, type Handlers, passedAnswerHeaders } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";
import { postOnly } from "../runtime/mod.ts";

type AppRouteHandlers = Pick<
  Handlers,
  "callAppGet" | "callAppHead" | "callAppPut" | "callAppPatch" | "callAppDelete" | "callAppOptions"
>;

/** What a call of a route needs of its input (the same for every method: HEAD's has no body). */
type RouteInput =
  & Pick<HandlerInput<"callAppGet">, "path" | "passed" | "setRequestId" | "logOutcome" | "abortOnDisconnect">
  & { body?: Uint8Array };

const NO_BODY = new Uint8Array(0);

/** The app's answer as the caller gets it: its status, the headers that pass, its body (none for HEAD). */
interface PassedAnswer {
  status: number;
  headers: Record<string, string | string[]>;
  body: AsyncIterable<Uint8Array>;
}

/** Runs one call of the app's route: checks the app takes the method, runs it, answers the app's answer. */
async function callRoute(
  context: ServerContext,
  input: RouteInput,
): Promise<PassedAnswer> {
  const { runtime, runs } = context;
  const { path } = input;
  const passed = input.passed!;
  const projectId = path.project_id;
  const app = path.app_name;
  // Unknown and broken apps are refused before a run exists; so is a Python app, POST only.
  const settings = await runtime.findApp(projectId, app);
  if (settings.runtime !== "custom") throw postOnly(passed.method, `${projectId}/${app}`);
  const execution = await runs.execute({
    projectId,
    app,
    functionName: path.function_name,
    mode: "sync",
    input: {},
    http: {
      method: passed.method,
      query: passed.query,
      headers: passed.headers,
      body: input.body ?? NO_BODY,
    },
  }, {
    onLive(run) {
      input.setRequestId(run.runId);
      input.logOutcome(run);
      input.abortOnDisconnect(run);
    },
  });
  if (execution.kind !== "response") {
    throw new ProblemError("internal", `A call of ${projectId}/${app} by ${passed.method} was not answered as HTTP`);
  }
  const head = passed.method === "HEAD";
  return {
    status: execution.status,
    headers: passedAnswerHeaders(execution.headers, { head }),
    body: execution.body,
  };
}

/** Handlers of the custom runtime's routes, one per method. */
export function appRouteHandlers(context: ServerContext): AppRouteHandlers {
  async function withBody(input: RouteInput) {
    const answer = await callRoute(context, input);
    return { status: answer.status, contentType: "*/*" as const, body: answer.body, headers: answer.headers };
  }
  return {
    callAppGet: (input) => withBody(input),
    callAppPut: (input) => withBody(input),
    callAppPatch: (input) => withBody(input),
    callAppDelete: (input) => withBody(input),
    callAppOptions: (input) => withBody(input),
    async callAppHead(input) {
      const answer = await callRoute(context, input);
      // A HEAD answer has no body: read it (empty) to its end, which records the run.
      for await (const _chunk of answer.body) {
        // Nothing to pass.
      }
      return { status: answer.status, headers: answer.headers };
    },
  };
}
