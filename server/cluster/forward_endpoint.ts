/**
 * The remote side of a forwarded call: runs a call another host forwarded (its credential already
 * verified) on this host's executor, and answers with the frames of `_frames.ts` as they are produced.
 * It only executes: the forwarding host keeps the run's record.
 */
import { type AbortSignalLike, LightAbortController } from "../abort/mod.ts";
import { startLightDeadline } from "../deadline/mod.ts";
import { isProblemError, ProblemError } from "../problems/mod.ts";
import { type ExecutedItem, type HttpRequestPart, type RunExecutor, toRunError } from "../runs/mod.ts";
import { storeUnavailableReason } from "../store/mod.ts";
import { RunFailure } from "../runtime/mod.ts";
import { type Frame, frameLine } from "./_frames.ts";

/** A verified forwarded call. */
export interface ForwardedCallInput {
  projectId: string;
  appId: string;
  functionName: string;
  /** The call's JSON body as the caller sent it: must be a JSON object (unread for an `http` call). */
  inputJson: string;
  /** A call of a custom runtime's route by another method than POST: what is passed to the app. */
  http?: HttpRequestPart;
  runId: string;
  /** What is left of the run's time on the forwarding host; past it the call fails with `timeout`. */
  deadlineMs?: number;
  /** Aborted when the forwarding host goes away (its connection closed): the function is stopped. */
  signal: AbortSignalLike;
}

/** The frame of a problem: its kind (`not-found`), status, detail and `Retry-After`. */
function problemFrame(problem: ProblemError): Frame {
  const retryAfter = problem.options.headers?.["Retry-After"];
  const allow = problem.options.headers?.Allow;
  return {
    problem: {
      status: problem.status,
      type: problem.kind,
      detail: problem.message,
      ...(retryAfter === undefined ? {} : { retryAfter }),
      ...(allow === undefined ? {} : { allow }),
    },
  };
}

/**
 * The frame of a failure: a problem when the call could not start, else the run's error. The store
 * refusing here (a seat claim before the function started) is a 503 `store-unavailable` problem, so the
 * forwarding host knows the call never reached the function: it may try it elsewhere, or again later.
 */
function failureFrame(error: unknown): Frame {
  if (isProblemError(error) && !("errorType" in error)) return problemFrame(error);
  const refused = storeUnavailableReason(error);
  if (refused !== null) {
    return problemFrame(
      new ProblemError("store-unavailable", `This host's store refused while it set up the call (${refused}); retry`, {
        headers: { "Retry-After": "1" },
      }),
    );
  }
  return { error: toRunError(error) };
}

/** The arguments of a call: its body parsed, or the problem of a body that is not a JSON object. */
function parseInput(inputJson: string): Record<string, unknown> | ProblemError {
  let input: unknown;
  try {
    input = JSON.parse(inputJson);
  } catch (error) {
    return new ProblemError("malformed-json", `The forwarded call's body is not JSON: ${(error as Error).message}`);
  }
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    return new ProblemError("bad-request", "The forwarded call's body must be a JSON object: the function's arguments");
  }
  return input as Record<string, unknown>;
}

/** Settles with `promise`, or rejects with the signal's reason as soon as it aborts. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignalLike): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** A stream's item as its frame. */
function itemFrame({ value, event }: ExecutedItem): Frame {
  return event === undefined ? { item: value } : { item: value, event };
}

/** A piece of an answer's body as its frame. */
function chunkFrame(chunk: Uint8Array): Frame {
  return { chunk: Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString("base64") };
}

/**
 * The frames of a stream's items (or an answer's body), then its end; stops the stream when the reader or
 * the signal stops.
 */
async function* itemFrames<T>(
  items: AsyncIterable<T>,
  options: { signal: AbortSignalLike; frame(item: T): Frame },
): AsyncGenerator<Frame> {
  const { signal } = options;
  const iterator = items[Symbol.asyncIterator]();
  let ended = false;
  try {
    for (;;) {
      const next = await untilAborted(iterator.next(), signal);
      if (next.done) break;
      yield options.frame(next.value);
    }
    ended = true;
    yield { end: true };
  } finally {
    // Stops the function when the stream did not end by itself (a reader gone, a deadline, a failure).
    if (!ended) void iterator.return?.()?.catch(() => {});
  }
}

/**
 * Runs `input` on `executor` (this host's own replicas: a forwarded call is never forwarded again) and
 * yields its NDJSON lines: the deployment, then the result or the stream's items as they come, or the
 * failure. A body that is not a JSON object is a 400 problem frame and runs nothing. Past `deadlineMs`
 * the function is stopped and the call fails with `timeout`; when `signal` aborts it is stopped and
 * nothing more is yielded. Stopping the iteration early stops the function too.
 */
export async function* serveForwardedCall(input: ForwardedCallInput, executor: RunExecutor): AsyncGenerator<string> {
  const parsed = input.http ? {} : parseInput(input.inputJson);
  if (parsed instanceof ProblemError) {
    yield frameLine(problemFrame(parsed));
    return;
  }
  const controller = new LightAbortController();
  const onAbort = () => controller.abort(input.signal.reason);
  if (input.signal.aborted) return;
  input.signal.addEventListener("abort", onAbort, { once: true });
  const deadline = input.deadlineMs === undefined
    ? undefined
    : startLightDeadline(Math.max(0, input.deadlineMs), { signal: controller.signal });
  const signal = deadline?.signal ?? controller.signal;
  let finished = false;
  try {
    for await (const frame of callFrames({ ...input, input: parsed }, { executor, signal })) {
      if (input.signal.aborted) return;
      yield frameLine(frame);
    }
    finished = true;
  } catch (error) {
    finished = true;
    if (input.signal.aborted) return;
    yield frameLine(failureFrame(deadline?.timedOut ? timedOut(input) : error));
  } finally {
    deadline?.clear();
    input.signal.removeEventListener("abort", onAbort);
    // The reader stopped early: whatever still runs is told to stop.
    if (!finished) {
      controller.abort(
        new RunFailure("interrupted", "The run was interrupted before it finished", { runId: input.runId }),
      );
    }
  }
}

/** The failure of a call that outlived the time the forwarding host had left for it. */
function timedOut(input: ForwardedCallInput): RunFailure {
  return new RunFailure(
    "timeout",
    `The run exceeded its deadline (${
      Math.round((input.deadlineMs ?? 0) / 1000)
    } s were left when it was forwarded) and was stopped`,
    { runId: input.runId },
  );
}

/** The frames of one execution; throws what the execution threw (or the signal's reason). */
async function* callFrames(
  input: ForwardedCallInput & { input: Record<string, unknown> },
  options: { executor: RunExecutor; signal: AbortSignalLike },
): AsyncGenerator<Frame> {
  const { signal } = options;
  let deploymentId: string | undefined;
  let announce = (_id: string) => {};
  const announced = new Promise<string>((resolve) => (announce = resolve));
  const running = options.executor.execute({
    projectId: input.projectId,
    app: input.appId,
    functionName: input.functionName,
    input: input.input,
    inputJson: input.inputJson,
    http: input.http,
    runId: input.runId,
    signal,
    onDeployment(id) {
      deploymentId ??= id;
      announce(id);
    },
  });
  // Reported even when nobody awaits it any more (the signal won the race).
  running.catch(() => {});
  const first = await untilAborted(Promise.race([announced, running]), signal);
  if (deploymentId !== undefined) yield { deployment: deploymentId };
  const outcome = typeof first === "string" ? await untilAborted(running, signal) : first;
  if (outcome.kind === "result") {
    yield { result: outcome.result, runTimeMs: outcome.runTimeMs };
    return;
  }
  if (outcome.kind === "response") {
    yield { response: { status: outcome.status, headers: outcome.headers } };
    yield* itemFrames(outcome.body, { signal, frame: chunkFrame });
    return;
  }
  yield { stream: true };
  yield* itemFrames(outcome.items, { signal, frame: itemFrame });
}
