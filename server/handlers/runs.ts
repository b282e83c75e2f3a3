import type { ServerContext } from "../context.ts";
import { frameEvent, type Handlers, withHeartbeat } from "../http/mod.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import type { LiveRun, Run } from "../runs/mod.ts";
import { failureFromRunError, type StreamItem } from "../runtime/mod.ts";

type RunHandlers = Pick<Handlers, "runFunction" | "getRun" | "cancelRun" | "listRuns">;

/** Options of `frames`. */
interface FrameOptions {
  run: LiveRun;
  instance: string;
}

/**
 * Frames each item as one server-sent event as it arrives and reports it to the run record. A failure
 * becomes the stream's last event (the status line is gone already); a client that goes away ends the
 * run `cancelled`.
 */
async function* frames(items: AsyncIterable<StreamItem>, options: FrameOptions): AsyncGenerator<string> {
  const { run } = options;
  let finished = false;
  try {
    for await (const item of items) {
      run.item(item.value);
      yield frameEvent(typeof item.value === "string" ? item.value : JSON.stringify(item.value), { event: item.event });
    }
    finished = true;
    await run.succeed();
  } catch (error) {
    finished = true;
    await run.fail(error);
    const problem = isProblemError(error)
      ? error
      : new ProblemError("internal", `The stream failed; quote run id ${run.runId} when reporting it`, {
        runId: run.runId,
      });
    yield frameEvent(JSON.stringify(problem.toDocument(options.instance)), { event: "error" });
  } finally {
    // Nobody reads an answer any more; a record the store refused is logged by the run service.
    if (!finished) run.cancelled().catch(() => {});
  }
}

/** The answer a finished run gave, for an idempotent replay of a sync call. */
function replayAnswer(run: Run) {
  if (run.status === "success") {
    return { run_id: run.run_id, run_time_ms: run.run_time_ms ?? 0, result: run.result ?? null };
  }
  if (run.error) throw failureFromRunError(run.run_id, run.error);
  throw new ProblemError(
    "conflict",
    `Run ${run.run_id} ended ${run.status}; send a new Idempotency-Key to call again`,
    { runId: run.run_id },
  );
}

/** The run API: calling functions and inspecting runs. */
export function runHandlers(context: ServerContext): RunHandlers {
  const { runtime, runs, config } = context;
  return {
    async runFunction(input) {
      const { path, query, header, body, instance } = input;
      const target = { projectId: path.project_id, app: path.app_name };
      // Unknown and broken apps, and private functions, are refused before a run exists.
      await runtime.findApp(target.projectId, target.app);
      if (path.function_name.startsWith("_")) {
        throw new ProblemError(
          "not-found",
          `Function ${path.function_name} is private: names starting with _ cannot be called`,
        );
      }
      const submission = await runs.submit({
        ...target,
        functionName: path.function_name,
        mode: query.async ? "async" : "sync",
        input: body ?? {},
        inputJson: input.bodyText,
        webhook: query.webhookEndpoint
          ? { endpoint: query.webhookEndpoint, secret: header["X-Webhook-Secret"] }
          : undefined,
        idempotencyKey: header["Idempotency-Key"],
      });
      const app = `${target.projectId}/${target.app}`;
      if (submission.kind === "accepted") {
        input.setRequestId(submission.runId);
        input.logFields({ run_id: submission.runId, app, function: path.function_name, mode: "async" });
        return { status: 202, contentType: "application/json", body: { run_id: submission.runId } };
      }
      if (submission.kind === "replay") {
        const { run } = submission;
        input.setRequestId(run.run_id);
        input.logFields({ run_id: run.run_id, app, function: run.function_name, mode: run.mode, replayed: true });
        return { status: 200, contentType: "application/json", body: replayAnswer(submission.run) };
      }
      const run = submission.run;
      input.setRequestId(run.runId);
      // The request's one log line waits for the run's end and reports it (run id, status, times).
      input.logOutcome(run);
      // A sync or stream call stops with its caller (an async run outlives its request).
      input.abortOnDisconnect(run);
      let outcome;
      try {
        outcome = await runtime.invoke({
          ...target,
          functionName: path.function_name,
          input: body ?? {},
          inputJson: input.bodyText,
          runId: run.runId,
          signal: run.signal,
        });
      } catch (error) {
        await run.fail(error);
        throw error;
      }
      if (outcome.kind === "result") {
        // The record, the webhook and a replay say the run time the caller is answered.
        const runTimeMs = Math.round(outcome.runTimeMs * 1000) / 1000;
        await run.succeed(outcome.result, { runTimeMs });
        return {
          status: 200,
          contentType: "application/json",
          body: { run_id: run.runId, run_time_ms: runTimeMs, result: outcome.result },
        };
      }
      run.streaming();
      const stream = frames(outcome.items, { run, instance });
      return {
        status: 200,
        contentType: "text/event-stream",
        body: withHeartbeat(stream, { intervalMs: config.sseHeartbeatMs }),
      };
    },
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
