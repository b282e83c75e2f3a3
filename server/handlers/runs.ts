import type { ServerContext } from "../context.ts";
import {
  eventStream,
  frameEvent,
  frameEventBytes,
  type Handlers,
  wantsEventStream,
  withHeartbeat,
} from "../http/mod.ts";
import { RawJson } from "../json/mod.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import type { ExecutedItem, Run } from "../runs/mod.ts";
import { failureFromRunError } from "../runtime/mod.ts";

type RunHandlers = Pick<
  Handlers,
  "runFunction" | "getRun" | "cancelRun" | "listRuns" | "listProjectRuns" | "redeliverWebhook" | "getRunLogs"
>;

/** An item as its server-sent event; a big item comes as its JSON text's bytes (`RawJson`), framed as they are. */
function itemEvent({ value, event }: ExecutedItem): string | Uint8Array {
  if (value instanceof RawJson) return frameEventBytes(value.chunks(), { event });
  return frameEvent(typeof value === "string" ? value : JSON.stringify(value), { event });
}

/** A stream's failure as its last event, a problem document: the status line is gone already. */
function failureEvent(error: unknown, options: { runId: string; instance: string }): string {
  const problem = isProblemError(error)
    ? error
    : new ProblemError("internal", `The stream failed; quote run id ${options.runId} when reporting it`, {
      runId: options.runId,
    });
  return frameEvent(JSON.stringify(problem.toDocument(options.instance)), { event: "error" });
}

/**
 * A stream's items as its events, each as it arrives (the run service records it as it passes), a
 * failure as the last event, a ping after each `intervalMs` of silence.
 */
function itemEvents(
  items: AsyncIterable<ExecutedItem>,
  options: { runId: string; instance: string; intervalMs: number },
) {
  return eventStream(items, {
    frame: itemEvent,
    failure: (error) => failureEvent(error, options),
    intervalMs: options.intervalMs,
  });
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
      const app = `${target.projectId}/${target.app}`;
      const execution = await runs.execute({
        // Named, not spread: on Node 20 each property after a spread costs ~0.5 µs.
        projectId: target.projectId,
        app: target.app,
        functionName: path.function_name,
        mode: query.async ? "async" : "sync",
        input: body ?? {},
        inputJson: input.bodyText,
        webhook: query.webhookEndpoint
          ? { endpoint: query.webhookEndpoint, secret: header["X-Webhook-Secret"] }
          : undefined,
        idempotencyKey: header["Idempotency-Key"],
        rerunOf: query.rerunOf,
      }, {
        onLive(run) {
          input.setRequestId(run.runId);
          // The request's one log line waits for the run's end and reports it (run id, status, times).
          input.logOutcome(run);
          // A sync or stream call stops with its caller (an async run outlives its request).
          input.abortOnDisconnect(run);
        },
      });
      switch (execution.kind) {
        case "accepted":
          input.setRequestId(execution.runId);
          input.logFields({ run_id: execution.runId, app, function: path.function_name, mode: "async" });
          return { status: 202, contentType: "application/json", body: { run_id: execution.runId } };
        case "replay": {
          const { run } = execution;
          input.setRequestId(run.run_id);
          input.logFields({ run_id: run.run_id, app, function: run.function_name, mode: run.mode, replayed: true });
          return { status: 200, contentType: "application/json", body: replayAnswer(run) };
        }
        case "result":
          return {
            status: 200,
            contentType: "application/json",
            body: { run_id: execution.runId, run_time_ms: execution.runTimeMs, result: execution.result },
          };
        case "response": // only a call by another method (`http`) is answered so, never a POST
          throw new ProblemError("internal", `Run ${execution.runId} was answered as HTTP; call it by POST`);
        case "stream":
          return {
            status: 200,
            contentType: "text/event-stream",
            body: itemEvents(execution.items, { runId: execution.runId, instance, intervalMs: config.sseHeartbeatMs }),
          };
      }
    },
    async getRun({ path }) {
      const run = await runs.getRun({ projectId: path.project_id, appId: path.app_id, runId: path.run_id });
      return { status: 200, contentType: "application/json", body: run };
    },
    async cancelRun({ path }) {
      const run = await runs.cancelRun({ projectId: path.project_id, appId: path.app_id, runId: path.run_id });
      return { status: 200, contentType: "application/json", body: run };
    },
    async getRunLogs({ path, header, signal }) {
      const ref = { projectId: path.project_id, appId: path.app_id, runId: path.run_id };
      if (!wantsEventStream(header.accept)) {
        return { status: 200, contentType: "application/json", body: await runs.getRunLog(ref) };
      }
      const lines = await runs.followRunLog(ref, signal);
      async function* framed(): AsyncGenerator<string> {
        for await (const line of lines) {
          yield "end" in line
            ? frameEvent(JSON.stringify({ status: line.end }), { event: "end" })
            : frameEvent(JSON.stringify(line));
        }
      }
      return {
        status: 200,
        contentType: "text/event-stream",
        body: withHeartbeat(framed(), { intervalMs: config.sseHeartbeatMs }),
      };
    },
    async redeliverWebhook({ path }) {
      const run = await runs.redeliverWebhook({ projectId: path.project_id, appId: path.app_id, runId: path.run_id });
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
    async listProjectRuns({ path, query }) {
      const page = await runs.listProjectRuns(path.project_id, {
        appId: query.app_id,
        functionName: query.function_name,
        status: query.status,
        mode: query.mode,
        createdAfter: query.created_after === undefined ? undefined : Date.parse(query.created_after),
        createdBefore: query.created_before === undefined ? undefined : Date.parse(query.created_before),
        limit: query.limit,
        cursor: query.cursor,
      });
      return { status: 200, contentType: "application/json", body: page };
    },
  };
}
