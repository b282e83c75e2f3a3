import type { ServerContext } from "../context.ts";
import { frameEvent, type Handlers, withHeartbeat } from "../http/mod.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import { newRunId, type StreamItem } from "../runtime/mod.ts";

type RunHandlers = Pick<Handlers, "runFunction" | "getRun" | "cancelRun" | "listRuns">;

function notYet(operation: string): never {
  throw new ProblemError("not-implemented", `${operation} is not implemented on this server yet`);
}

/** Options of `eventStream`. */
interface EventStreamOptions {
  runId: string;
  instance: string;
}

async function* frames(items: AsyncIterable<StreamItem>, options: EventStreamOptions): AsyncGenerator<string> {
  try {
    for await (const item of items) {
      yield frameEvent(typeof item.value === "string" ? item.value : JSON.stringify(item.value), { event: item.event });
    }
  } catch (error) {
    // The status line is gone already: the failure becomes the stream's last event.
    const problem = isProblemError(error)
      ? error
      : new ProblemError("internal", `The stream failed; quote run id ${options.runId} when reporting it`, { runId: options.runId });
    yield frameEvent(JSON.stringify(problem.toDocument(options.instance)), { event: "error" });
  }
}

/** The run API: calling functions and inspecting runs. */
export function runHandlers(context: ServerContext): RunHandlers {
  const { runtime, config } = context;
  return {
    async runFunction({ path, query, body, signal, setRequestId, instance }) {
      if (query.async) notYet("An asynchronous run (async=true)");
      const runId = newRunId();
      setRequestId(runId);
      const headers = { "X-Request-Id": runId };
      // Record the run's start here (and its end below) once runs are stored.
      const outcome = await runtime.invoke({
        projectId: path.project_id,
        app: path.app_name,
        functionName: path.function_name,
        input: body ?? {},
        runId,
        signal,
      });
      if (outcome.kind === "result") {
        const runTimeMs = Math.round(outcome.runTimeMs * 1000) / 1000;
        return { status: 200, contentType: "application/json", headers, body: { run_id: runId, run_time_ms: runTimeMs, result: outcome.result } };
      }
      const stream = frames(outcome.items, { runId, instance });
      return { status: 200, contentType: "text/event-stream", headers, body: withHeartbeat(stream, { intervalMs: config.sseHeartbeatMs }) };
    },
    getRun: () => Promise.resolve(notYet("getRun")),
    cancelRun: () => Promise.resolve(notYet("cancelRun")),
    listRuns: () => Promise.resolve(notYet("listRuns")),
  };
}
