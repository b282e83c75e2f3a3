/**
 * What the runs module needs from a runtime, and nothing more: `server/runs` never imports the runtime;
 * `createServer` hands it an object of this shape (`server/run_executor.ts`).
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import { isProblemError } from "../problems/mod.ts";
import { storeUnavailableReason } from "../store/mod.ts";

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

/** Why a run failed, as the contract's `RunError` says. */
export interface RunErrorInfo {
  type: string;
  message: string;
  traceback: string | null;
}

/** The `RunError.type` of a problem that stood for a call that could not start: its kind, `not_found`. */
function problemType(kind: string): string {
  return kind.replace(/-/g, "_");
}

/**
 * The `RunError` for anything an executor threw: an object with `errorType` (or `type`), `errorMessage`
 * (or `message`) and `traceback` keeps them; a `ProblemError` without `errorType` (a call that could not
 * start) is typed by its kind (`not_found`, `service_unavailable`); the store refusing (a connection
 * refused, "too many clients", a statement timeout) is `store_unavailable`; any other error becomes
 * `upstream_error` with its message.
 */
export function toRunError(error: unknown): RunErrorInfo {
  const e = (error ?? {}) as {
    errorType?: unknown;
    errorMessage?: unknown;
    type?: unknown;
    message?: unknown;
    traceback?: unknown;
  };
  const type = typeof e.errorType === "string"
    ? e.errorType
    : isProblemError(error)
    ? problemType(error.kind)
    : typeof e.type === "string" && !(error instanceof Error)
    ? e.type
    : storeUnavailableReason(error) !== null
    ? "store_unavailable"
    : "upstream_error";
  return {
    type,
    message: typeof e.errorMessage === "string"
      ? e.errorMessage
      : typeof e.message === "string"
      ? e.message
      : String(error),
    traceback: typeof e.traceback === "string" ? e.traceback : null,
  };
}

/**
 * Problem kinds of a call the platform could not start now, for a reason that passes: no replica may
 * run it here now and no host took it (503), a host's queue was full (429), the store refused (503).
 * An unknown app or function (`not-found`) or an app that cannot load (`app-unavailable`) does not pass
 * by waiting: such a run fails at once.
 */
const PASSING_KINDS: ReadonlySet<string> = new Set(["service-unavailable", "store-unavailable", "too-many-requests"]);

/**
 * Why an accepted async run could not start, when the reason is the platform's and passing (see
 * `PASSING_KINDS`, and the store refusing) — the run is put back on the queue and tried again — or null
 * when the failure is the run's own: its function raised, timed out, ran out of memory or was
 * interrupted, or the call reached a host that went away after it took it (the function may have run:
 * at most once). Only an error thrown before the function started may be passing (the caller knows when
 * it did); the answer is the `RunError` the run ends with if its deadline passes first.
 */
export function passingReason(error: unknown): RunErrorInfo | null {
  if (typeof error !== "object" || error === null || "errorType" in error) return null;
  if (isProblemError(error)) return PASSING_KINDS.has(error.kind) ? toRunError(error) : null;
  return storeUnavailableReason(error) === null ? null : toRunError(error);
}
