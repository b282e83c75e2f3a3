/**
 * One classifier from an error to a run's outcome: what a sync or stream run records when its call
 * failed (`_live_run.ts`), and what an accepted async run records or whether it is put back on the queue
 * (`_queued_run.ts`). Both ask `classifyFailure`; `toRunError` (the error's `RunError`) and
 * `passingReason` are read from it. `test/runs/failure_outcome_test.ts` is its table.
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import { isProblemError } from "../problems/mod.ts";
import { PASSING_START_FAILURE_TYPES, storeUnavailableReason } from "../store/mod.ts";
import { RunCancelled, RunTimedOut } from "./_local_runs.ts";

/** Why a run failed, as the contract's `RunError` says. */
export interface RunErrorInfo {
  type: string;
  message: string;
  traceback: string | null;
}

/**
 * What an error means for a run: it was cancelled, or it failed with `error`. `passing` is true for a
 * reason of the platform's that passes by waiting (no replica may run it here now and no host took it, a
 * host's queue was full, the store refused): an accepted async run whose function had not started yet is
 * put back on the queue for it instead of failing; a sync or stream call fails with it (its caller is
 * answered with the problem, and may retry).
 */
export type FailureOutcome =
  | { status: "cancelled" }
  | { status: "failure"; error: RunErrorInfo; passing: boolean };

/** Options of `classifyFailure`. */
export interface ClassifyOptions {
  /**
   * The run's signal: once it was aborted, its reason decides, not the error the call then failed with
   * (an interrupted function fails somehow; the run ended because it was stopped).
   */
  signal?: Pick<AbortSignalLike, "aborted" | "reason">;
}

const CANCELLED: FailureOutcome = { status: "cancelled" };

const PASSING_TYPES: ReadonlySet<string> = new Set(PASSING_START_FAILURE_TYPES);

/** The `RunError.type` of a problem that stood for a call that could not start: its kind, `not_found`. */
function problemType(kind: string): string {
  return kind.replace(/-/g, "_");
}

/**
 * The outcome of a run whose call failed with `error`:
 *
 * - the run's signal aborted (see `ClassifyOptions`): its grace period ran out (`RunTimedOut`) → failure
 *   `timeout`; any other reason (`cancelRun`, the caller went away) → cancelled;
 * - `RunCancelled` → cancelled; `RunTimedOut` → failure `timeout` (the reasons a run is stopped with);
 * - anything else → failure, named by `toRunError`; passing (see `FailureOutcome`) when it carries no
 *   `errorType` (a failure with one is the run's own: raised, timed out, out of memory, crashed,
 *   interrupted, a host gone after it took the call) and is a problem of a passing kind
 *   (`PASSING_START_FAILURE_TYPES`) or the store refusing.
 *
 * One rule for every run, whichever way it was called. The case the two classifiers before it read
 * differently, a `ProblemError` without an `errorType` (a call that could not start: unknown app or
 * function, an app that cannot load, no replica now), is named by the problem's kind (`not_found`,
 * `app_unavailable`, `service_unavailable`) for a sync run as for an async one, never `upstream_error`:
 * no upstream was reached, and the kind is what the caller was answered. Whether the run then fails or
 * waits is the caller's to decide from `passing` and whether its function started (issue 44: an
 * accepted async run fails only for its own reasons).
 */
export function classifyFailure(error: unknown, options: ClassifyOptions = {}): FailureOutcome {
  const signal = options.signal;
  if (signal?.aborted) return signal.reason instanceof RunTimedOut ? timedOut(signal.reason) : CANCELLED;
  if (error instanceof RunCancelled) return CANCELLED;
  if (error instanceof RunTimedOut) return timedOut(error);
  return { status: "failure", error: toRunError(error), passing: isPassing(error) };
}

function timedOut(reason: RunTimedOut): FailureOutcome {
  return { status: "failure", error: { type: "timeout", message: reason.message, traceback: null }, passing: false };
}

/** Whether `error` is a passing reason of the platform's (see `classifyFailure`). */
function isPassing(error: unknown): boolean {
  if (typeof error !== "object" || error === null || "errorType" in error) return false;
  if (isProblemError(error)) return PASSING_TYPES.has(problemType(error.kind));
  return storeUnavailableReason(error) !== null;
}

/**
 * The `RunError` for anything an executor threw: an object with `errorType` (or `type`), `errorMessage`
 * (or `message`) and `traceback` keeps them; a `ProblemError` without `errorType` (a call that could not
 * start) is typed by its kind (`not_found`, `service_unavailable`); the store refusing (a connection
 * refused, "too many clients", a statement timeout) is `store_unavailable`; any other error (a bug, an
 * `AbortError`, a thrown string) becomes `upstream_error` with its message.
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
 * Why an accepted async run could not start, when the reason is the platform's and passing — the run is
 * put back on the queue and tried again — or null when the failure is the run's own (see
 * `classifyFailure`). Only an error thrown before the function started may be passing (the caller knows
 * when it did); the answer is the `RunError` the run ends with if its deadline passes first.
 */
export function passingReason(error: unknown): RunErrorInfo | null {
  const outcome = classifyFailure(error);
  return outcome.status === "failure" && outcome.passing ? outcome.error : null;
}
