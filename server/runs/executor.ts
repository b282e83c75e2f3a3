/**
 * What the runs module needs from a runtime, and nothing more: `server/runs` never imports the runtime;
 * `createServer` hands it an object of this shape (`server/placement/runtime_executor.ts`).
 */
import type { AbortSignalLike } from "../abort/mod.ts";

// How an executor's error becomes a run's outcome lives in `failure_outcome.ts`; these are read from there.
export { passingReason, type RunErrorInfo, toRunError } from "./failure_outcome.ts";

/** The app a run belongs to. */
export interface AppTarget {
  projectId: string;
  app: string;
}

/**
 * A call of a custom runtime's route by another method than POST, passed to the app as HTTP: its method,
 * query string and headers, and its body as sent (`functionName` is the route's path).
 */
export interface HttpRequestPart {
  method: string;
  /** The query string as sent, without `?`; empty for none. */
  query: string;
  /** The caller's headers that reach the app, as name and value. */
  headers: Array<[string, string]>;
  /** The body as sent; empty for none. */
  body: Uint8Array;
}

/** A custom runtime's answer, passed through: its 2xx status, its headers, its body as the app writes it. */
export interface HttpResponsePart {
  status: number;
  headers: Array<[string, string]>;
  /** Read to the end (the app's slot is free then), or stop reading to stop the call. */
  body: AsyncIterable<Uint8Array>;
}

/** One invocation of a function. */
export interface ExecuteRequest extends AppTarget {
  functionName: string;
  /** The call's JSON body: the function's named parameters. */
  input: Record<string, unknown>;
  /** `input` as the JSON text the caller sent, to forward as is. */
  inputJson?: string;
  /** For a call of a custom runtime's route by another method than POST: what is passed to the app. */
  http?: HttpRequestPart;
  runId: string;
  /** Aborted on timeout (`response_grace_period`), cancel or a caller gone: stop the worker. */
  signal: AbortSignalLike;
  /**
   * Told the deployment whose replica takes the call, once one does (before the function runs); never for
   * an app of the apps folder.
   */
  onDeployment?(deploymentId: string): void;
}

/** One streamed item: a value (strings as they are), with an SSE event name when the function gave one. */
export interface ExecutedItem {
  value: unknown;
  event?: string;
}

/**
 * What a function gave back: a result with the function's run time in milliseconds, a stream of items
 * read as they are produced (stop reading to stop the function), or for an `http` call the app's answer.
 */
export type ExecutedCall =
  | { kind: "result"; result: unknown; runTimeMs: number }
  | { kind: "stream"; items: AsyncIterable<ExecutedItem> }
  | ({ kind: "response" } & HttpResponsePart);

/** Runs functions: sync and stream calls, and the async dispatcher's runs. */
export interface RunExecutor {
  /**
   * Slots the app can take now. Must count every `execute` call that has not settled, so a dispatcher
   * that calls `execute` right after asking never overfills the app. 0 when the app is full or not ready.
   */
  freeSlots(target: AppTarget): number | Promise<number>;
  /** The app's `response_grace_period` in milliseconds; undefined → 900 s. Capped at 12 h. */
  gracePeriodMs(target: AppTarget): number | undefined | Promise<number | undefined>;
  /**
   * Runs the function. Resolves with its JSON result, or with its stream once it started. Rejects with
   * an error carrying `errorType`, `message` and `traceback` (see `toRunError`) when the function failed
   * (or may have: a host that went away after it took the call), or with a `ProblemError` without
   * `errorType` when it could not start (no such app, app unavailable, no replica may run it now); a
   * store error thrown before the function started (a seat claim the store refused) passes through.
   */
  execute(request: ExecuteRequest): Promise<ExecutedCall>;
}
