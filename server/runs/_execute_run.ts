/**
 * Executing a run and recording it: the one step that sync, stream and async runs share. It calls the
 * function through the `RunExecutor`, and reports to the run's recorder what happened — a result, each
 * streamed item and the stream's end, a failure, or a reader that went away.
 */
import type { ExecuteRequest, ExecutedItem, HttpResponsePart, RunExecutor } from "./executor.ts";
import { recordedBody } from "./_recorded_body.ts";
import type { RunRecorder } from "./run_call.ts";

/** What the function gave, once recorded (a stream is recorded as it is read). */
export type RunExecution =
  /** A result, recorded; `runTimeMs` is the function's run time as the caller is answered. */
  | { kind: "result"; runId: string; result: unknown; runTimeMs: number }
  /**
   * A stream: read `items` to the end (each is recorded as it passes; the end records success) or stop
   * reading (the run ends `cancelled`). A failure is recorded, then thrown from `items`.
   */
  | { kind: "stream"; runId: string; items: AsyncIterable<ExecutedItem> }
  /**
   * A custom runtime's answer to a call by another method (`http`): read `body` to the end (the end
   * records success, with the body as the result when it is JSON or text and small enough) or stop reading
   * (the run ends `cancelled`). A failure is recorded, then thrown from `body`.
   */
  | ({ kind: "response"; runId: string } & HttpResponsePart);

async function* recordedItems(items: AsyncIterable<ExecutedItem>, record: RunRecorder): AsyncGenerator<ExecutedItem> {
  let finished = false;
  try {
    for await (const item of items) {
      record.item(item.value);
      yield item;
    }
    finished = true;
    await record.succeed();
  } catch (error) {
    finished = true;
    await record.fail(error);
    throw error;
  } finally {
    // Nobody reads the items any more; a record the store refused is logged by whoever stores it.
    if (!finished) record.cancelled().catch(() => {});
  }
}

/**
 * Executes `request` as the run `record` stands for, with the run's id and signal. Calls the executor
 * before its first `await`, so an executor counting its calls counts this one at once. Rejects with the
 * executor's error once the failure is recorded (or with the recorder's error when it could not record).
 */
export async function executeRun(
  executor: RunExecutor,
  request: Omit<ExecuteRequest, "runId" | "signal">,
  record: RunRecorder,
): Promise<RunExecution> {
  const runId = record.runId;
  let outcome;
  try {
    // Named, not spread (`request` has these fields): on Node 20 each property after a spread costs ~0.5 µs.
    outcome = await executor.execute({
      projectId: request.projectId,
      app: request.app,
      functionName: request.functionName,
      input: request.input,
      inputJson: request.inputJson,
      http: request.http,
      runId,
      signal: record.signal,
      onDeployment: (deploymentId) => record.servedBy(deploymentId),
    });
  } catch (error) {
    await record.fail(error);
    throw error;
  }
  if (outcome.kind === "result") {
    // The record, the webhook and a replay say the run time the caller is answered.
    const runTimeMs = Math.round(outcome.runTimeMs * 1000) / 1000;
    await record.succeed(outcome.result, { runTimeMs });
    return { kind: "result", runId, result: outcome.result, runTimeMs };
  }
  if (outcome.kind === "response") {
    const { status, headers } = outcome;
    return { kind: "response", runId, status, headers, body: recordedBody(outcome, record) };
  }
  record.streaming();
  return { kind: "stream", runId, items: recordedItems(outcome.items, record) };
}
