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

/** One invocation of a function. */
export interface ExecuteRequest extends AppTarget {
  functionName: string;
  /** The call's JSON body: the function's named parameters. */
  input: Record<string, unknown>;
  /** `input` as the JSON text the caller sent, to forward as is. */
  inputJson?: string;
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
 * What a function gave back: a result with the function's run time in milliseconds, or a stream of items
 * read as they are produced (stop reading to stop the function).
 */
export type ExecutedCall =
  | { kind: "result"; result: unknown; runTimeMs: number }
  | { kind: "stream"; items: AsyncIterable<ExecutedItem> };

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
