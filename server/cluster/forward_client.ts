/**
 * The forwarding side of the hop: sends a call to another host of the cluster, which runs it on its own
 * replicas (`serveForwardedCall`), and reads its outcome back as it comes. The caller keeps the run's
 * record; this only executes, so it answers exactly as a local `RunExecutor.execute` does.
 */
import { Agent, type Dispatcher } from "undici";
import { PROBLEM_BASE, PROBLEM_KINDS, ProblemError, type ProblemKind } from "../problems/mod.ts";
import type { ExecutedCall, ExecutedItem, ExecuteRequest } from "../runs/mod.ts";
import { failureFromRunError, RunFailure } from "../runtime/mod.ts";
import { type ForwardKey, signForward } from "./_forward_credential.ts";
import { type Frame, FrameSplitter, type ProblemFrame } from "./_frames.ts";
import { encodeHttpPart, FORWARD_HTTP_HEADER } from "./_http_part.ts";

/** A call to forward: the same request a local executor takes. */
export interface ForwardRequest extends ExecuteRequest {}

/** Options of `forwardCall`. */
export interface ForwardCallOptions {
  /** Signs the call's credential (`forwardKey` of the master key every process is given). */
  key: ForwardKey;
  /** What is left of the run's time; the remote stops the function past it (error type `timeout`). */
  deadlineMs?: number;
  /** Where connections come from; default one keep-alive pool per host, shared by every call. */
  dispatcher?: Dispatcher;
  /** The clock the credential's time is read from (the store's, so skewed hosts agree); default `Date.now`. */
  now?(): number;
}

/**
 * The `Retry-After` of a 503 for a call no host took (one could not be reached, or refused the hop), in
 * seconds: as the cluster's other "no host could take it now" answers. A retry is routed afresh over the
 * view, which other hosts' heartbeats keep current, and goes to another host or a replica placed since.
 */
export const FORWARD_RETRY_AFTER_S = "1";

/** The path of the internal endpoint, below a host's advertised URL. */
export const FORWARD_PATH = "/internal/v1/calls";

let sharedAgent: Agent | undefined;

/**
 * The default dispatcher: keeps connections to each host open between calls. No body timeout: a
 * function may be silent for as long as its grace period allows, and the caller's deadline and signal
 * end the call; the remote sends its headers before it runs anything, so their timeout stays.
 */
function defaultDispatcher(): Agent {
  sharedAgent ??= new Agent({ keepAliveTimeout: 60_000, headersTimeout: 60_000, bodyTimeout: 0 });
  return sharedAgent;
}

/** Closes the default dispatcher's connections (a later call opens new ones); for tests and shutdown. */
export async function closeForwardConnections(): Promise<void> {
  const agent = sharedAgent;
  sharedAgent = undefined;
  await agent?.close();
}

/** The failure of a call its caller stopped (cancel, deadline, gone). */
export function interrupted(runId: string): RunFailure {
  return new RunFailure("interrupted", "The run was interrupted before it finished", { runId });
}

function describe(error: unknown): string {
  const e = error as { message?: string; code?: string; cause?: { code?: string; message?: string } };
  return e.cause?.code ?? e.code ?? e.cause?.message ?? e.message ?? String(error);
}

/** A problem frame (or document) as the `ProblemError` the remote raised; an unknown kind is a 502. */
function problemOf(frame: ProblemFrame, peer: string): ProblemError {
  const kind = frame.type.startsWith(PROBLEM_BASE) ? frame.type.slice(PROBLEM_BASE.length) : frame.type;
  const headers: Record<string, string> = {};
  if (frame.retryAfter !== undefined) headers["Retry-After"] = frame.retryAfter;
  if (frame.allow !== undefined) headers.Allow = frame.allow;
  if (kind in PROBLEM_KINDS) {
    return new ProblemError(kind as ProblemKind, frame.detail, {
      headers: Object.keys(headers).length ? headers : undefined,
    });
  }
  return new ProblemError("bad-gateway", `${peer} answered a problem of unknown type ${kind}`);
}

/**
 * A refusal of the whole call (not 200): the remote's problem when it is about the call (429, 413, 5xx:
 * draining, the store away); anything else (a bad credential, no such endpoint) says this host cannot
 * take forwarded calls, as a 503 the caller may try elsewhere.
 */
async function refusal(hostUrl: string, response: Dispatcher.ResponseData): Promise<ProblemError> {
  const text = await response.body.text().catch(() => "");
  let document: { type?: unknown; detail?: unknown } = {};
  try {
    document = JSON.parse(text) as typeof document;
  } catch {
    // Not a problem document: described by its status alone.
  }
  const status = response.statusCode;
  const type = typeof document.type === "string" ? document.type : "";
  const detail = typeof document.detail === "string" ? document.detail : `status ${status}`;
  const retryAfter = response.headers["retry-after"];
  const kind = type.slice(PROBLEM_BASE.length);
  if (type.startsWith(PROBLEM_BASE) && kind in PROBLEM_KINDS && (status === 429 || status === 413 || status >= 500)) {
    return problemOf(
      { status, type, detail, retryAfter: typeof retryAfter === "string" ? retryAfter : undefined },
      `The host at ${hostUrl}`,
    );
  }
  const hint = status === 401 ? "; give every process the same RUNPLANE_MASTER_KEY" : "";
  return new ProblemError(
    "service-unavailable",
    `The host at ${hostUrl} refused the forwarded call (${status}: ${detail})${hint}; try another host`,
    { headers: { "Retry-After": FORWARD_RETRY_AFTER_S } },
  );
}

/** The frames of an answer's body, one per line, as they arrive. */
export async function* readFrames(body: AsyncIterable<Buffer>): AsyncGenerator<Frame> {
  const lines = new FrameSplitter();
  for await (const chunk of body) {
    for (const line of lines.push(chunk)) if (line.length) yield JSON.parse(line.toString("utf8")) as Frame;
  }
  if (lines.pendingBytes > 0) throw new Error("the answer ended within a frame");
}

/** Reads what is left of an answer that is over, so its connection goes back to the pool. */
function drain(frames: AsyncGenerator<Frame>): void {
  void (async () => {
    for await (const _frame of frames) {
      // Nothing follows an outcome; anything that does is dropped.
    }
  })().catch(() => {});
}

/** What reading a call's answer needs of the call. */
export interface OpenCall {
  runId: string;
  /** Who runs the call, as messages name it: "The host at <url>", "This host's supervisor". */
  peer: string;
  signal: ExecuteRequest["signal"];
  /** Gives up the answer: closes its connection, which stops the function there. */
  abort(): void;
  /** Forgets the caller's signal: the call is over. */
  release(): void;
  /** How a call whose answer broke off fails; default `lost` (`upstream_error`). */
  cutOff?(error: unknown): RunFailure;
}

/** The failure of an answer that broke off (connection lost, cut short, unreadable). */
function lost(call: OpenCall, error: unknown): RunFailure {
  return new RunFailure("upstream_error", `${call.peer} went away during the call: ${describe(error)}`, {
    runId: call.runId,
  });
}

/** The failure of a call whose answer broke off: the call's own (`cutOff`), else `lost`. */
function brokeOff(call: OpenCall, error: unknown): RunFailure {
  return call.cutOff?.(error) ?? lost(call, error);
}

/** A stream's item of its frame, or undefined for a frame that is not one. */
function itemOf(frame: Frame): ExecutedItem | undefined {
  if (!("item" in frame)) return undefined;
  return frame.event === undefined ? { value: frame.item } : { value: frame.item, event: frame.event };
}

/** A piece of an answer's body of its frame, or undefined for a frame that is not one. */
function chunkOf(frame: Frame): Uint8Array | undefined {
  return typeof frame.chunk === "string" ? Buffer.from(frame.chunk, "base64") : undefined;
}

/**
 * The items of a forwarded stream (or the pieces of an answer's body: what `pick` finds in a frame), each
 * as its frame arrives; stopping early aborts the request.
 */
async function* streamItems<T>(
  frames: AsyncGenerator<Frame>,
  call: OpenCall,
  pick: (frame: Frame) => T | undefined,
): AsyncGenerator<T> {
  let over = false;
  try {
    for (;;) {
      let next: IteratorResult<Frame>;
      try {
        next = await frames.next();
      } catch (error) {
        throw call.signal.aborted ? interrupted(call.runId) : brokeOff(call, error);
      }
      if (next.done) throw brokeOff(call, new Error("the stream ended without its end"));
      const frame = next.value;
      const item = pick(frame);
      if (item !== undefined) {
        yield item;
        continue;
      }
      over = true;
      if (frame.end) return;
      if (frame.error) throw failureFromRunError(call.runId, frame.error);
      if (frame.problem) throw problemOf(frame.problem, call.peer);
      throw new RunFailure("protocol_violation", `${call.peer} sent an unknown frame in a stream`, {
        runId: call.runId,
      });
    }
  } finally {
    call.release();
    if (over) drain(frames);
    else call.abort();
  }
}

/**
 * Reads `frames` up to the call's outcome, as a local executor resolves: the result, or the stream
 * (its items read as they come; stopping early aborts the call). Rejects with the function's failure or
 * the remote's problem; anything else thrown (a connection lost) is for the caller to describe.
 */
export async function readOutcome(
  frames: AsyncGenerator<Frame>,
  call: OpenCall,
  request: ExecuteRequest,
): Promise<ExecutedCall> {
  for (;;) {
    const next = await frames.next();
    if (next.done) throw new Error("the answer ended before the call's outcome");
    const frame = next.value;
    if (frame.deployment !== undefined) {
      request.onDeployment?.(frame.deployment);
      continue;
    }
    if ("result" in frame) {
      call.release();
      drain(frames);
      return { kind: "result", result: frame.result, runTimeMs: frame.runTimeMs ?? 0 };
    }
    if (frame.stream) return { kind: "stream", items: streamItems(frames, call, itemOf) };
    if (frame.response) {
      const { status, headers } = frame.response;
      return { kind: "response", status, headers, body: streamItems(frames, call, chunkOf) };
    }
    if (frame.error) throw failureFromRunError(call.runId, frame.error);
    if (frame.problem) throw problemOf(frame.problem, call.peer);
    throw new RunFailure("protocol_violation", `${call.peer} sent an unknown frame`, {
      runId: call.runId,
    });
  }
}

/**
 * Forwards `request` to the host at `hostUrl` and resolves as a local executor does: with the result,
 * or with the stream once it started (its items read as the remote yields them). Rejects with the
 * function's failure (`toRunError` reads back the remote's type, message and traceback), with the
 * remote's `ProblemError` when it could not run the call (404, 429, 503, `Retry-After` kept), with a
 * 503 `service-unavailable` when the host could not be reached or refused the hop before running
 * anything (try another host), and with `upstream_error` when it went away after it took the call.
 * `request.signal` aborting closes the connection at any point, which stops the function there.
 */
export async function forwardCall(
  hostUrl: string,
  request: ExecuteRequest,
  options: ForwardCallOptions,
): Promise<ExecutedCall> {
  const { runId } = request;
  if (request.signal.aborted) throw interrupted(runId);
  const base = new URL(hostUrl);
  const path = `${base.pathname.replace(/\/$/, "")}${FORWARD_PATH}/${encodeURIComponent(request.projectId)}/${
    encodeURIComponent(request.app)
  }/${encodeURIComponent(request.functionName)}`;
  const credential = signForward(options.key, {
    runId,
    projectId: request.projectId,
    appId: request.app,
    functionName: request.functionName,
    at: Math.round((options.now ?? Date.now)()),
  });
  const headers: Record<string, string> = {
    "content-type": request.http ? "application/octet-stream" : "application/json",
    "x-runplane-forwarded": credential,
    "x-request-id": runId,
  };
  if (request.http) headers[FORWARD_HTTP_HEADER] = encodeHttpPart(request.http);
  if (options.deadlineMs !== undefined) {
    headers["x-runplane-deadline-ms"] = String(Math.max(0, Math.floor(options.deadlineMs)));
  }
  const controller = new AbortController();
  const onAbort = () => controller.abort();
  request.signal.addEventListener("abort", onAbort, { once: true });
  const call: OpenCall = {
    runId,
    peer: `The host at ${hostUrl}`,
    signal: request.signal,
    abort: () => controller.abort(),
    release: () => request.signal.removeEventListener("abort", onAbort),
  };
  let response: Dispatcher.ResponseData;
  try {
    response = await (options.dispatcher ?? defaultDispatcher()).request({
      origin: base.origin,
      path,
      method: "POST",
      headers,
      body: request.http ? request.http.body : request.inputJson ?? JSON.stringify(request.input),
      signal: controller.signal,
    });
  } catch (error) {
    call.release();
    if (request.signal.aborted) throw interrupted(runId);
    throw new ProblemError(
      "service-unavailable",
      `The host at ${hostUrl} could not be reached to forward the call (${describe(error)}); try another host`,
      { cause: error, headers: { "Retry-After": FORWARD_RETRY_AFTER_S } },
    );
  }
  if (response.statusCode !== 200) {
    call.release();
    throw await refusal(hostUrl, response);
  }
  const frames = readFrames(response.body);
  try {
    return await readOutcome(frames, call, request);
  } catch (error) {
    call.release();
    const answered = error instanceof ProblemError;
    if (answered) drain(frames);
    else controller.abort();
    if (request.signal.aborted) throw interrupted(runId);
    throw answered ? error : lost(call, error);
  }
}
