/** Typed run failures: what went wrong (`errorType`), for the run record and for the HTTP answer. */
import { ProblemError, type ProblemKind } from "../problems/mod.ts";
import type { RunFailureType } from "../store/mod.ts";

/**
 * How a run failed: the Python exception's type name, or one of the fixed kinds below (the contract's
 * `RunError.type`).
 */
export type RunErrorType = RunFailureType | (string & Record<never, never>);

/** The problem each fixed kind answers over HTTP (every kind has one: the compiler holds the list whole). */
const KIND_OF: Record<RunFailureType, ProblemKind> = {
  timeout: "gateway-timeout",
  interrupted: "interrupted",
  worker_crashed: "worker-crashed",
  "out-of-memory": "out-of-memory",
  invalid_arguments: "unprocessable",
  not_serializable: "function-error",
  upstream_error: "bad-gateway",
  protocol_violation: "bad-gateway",
  too_large: "function-error",
  bad_batch_result: "function-error",
};

/** Options of `RunFailure`. */
export interface RunFailureOptions {
  runId: string;
  /** The exception's traceback, for a raised exception. */
  traceback?: string;
  /** True when `errorType` is an exception's type name rather than a fixed kind. */
  exception?: boolean;
}

/**
 * A run that started and failed. It is a `ProblemError`, so a handler may just let it propagate: the
 * status follows the kind (500 exception, 504 timeout, 502 crash/upstream, 422 bad arguments).
 *
 * `message` is the record's `RunError.message`. For a raised exception it is the exception's own message,
 * and the problem's `detail` (this error's `message`) reads `Type: message`: the type is said once,
 * whether one reads the detail or the record's type and message side by side.
 */
export class RunFailure extends ProblemError {
  /** The contract's `RunError.type`: exception type name or a fixed kind such as `timeout`. */
  readonly errorType: RunErrorType;
  /** The contract's `RunError.message`: without the type (see the class). */
  readonly errorMessage: string;
  readonly traceback: string | undefined;
  readonly runId: string;

  constructor(errorType: RunErrorType, message: string, options: RunFailureOptions) {
    const fixed = !options.exception && Object.hasOwn(KIND_OF, errorType);
    const kind = fixed ? KIND_OF[errorType as RunFailureType] : "function-error";
    super(kind, options.exception ? `${errorType}: ${message}` : message, {
      runId: options.runId,
      exceptionType: options.exception ? errorType : undefined,
      traceback: options.traceback,
    });
    this.name = "RunFailure";
    this.errorType = errorType;
    this.errorMessage = message;
    this.traceback = options.traceback;
    this.runId = options.runId;
  }

  /** The failure as the contract's `RunError`. */
  toRunError(): { type: string; message: string; traceback: string | null } {
    return { type: this.errorType, message: this.errorMessage, traceback: this.traceback ?? null };
  }
}

/**
 * The failure a stored `RunError` stands for, e.g. to answer an idempotent replay of a failed call
 * the way the first call was answered.
 */
export function failureFromRunError(
  runId: string,
  error: { type: string; message: string; traceback?: string | null },
): RunFailure {
  return new RunFailure(error.type, error.message, {
    runId,
    traceback: error.traceback ?? undefined,
    exception: !(error.type in KIND_OF),
  });
}

/** A byte count as people read a memory limit: `256 MiB`, `2 GiB`, `1.5 GiB`. */
export function memoryText(bytes: number): string {
  const gib = bytes / 1024 ** 3;
  if (gib >= 1) return `${Number(gib.toFixed(2))} GiB`;
  return `${Number((bytes / 1024 ** 2).toFixed(1))} MiB`;
}

/** The failure of a call whose replica the kernel killed at its memory limit (the cgroup's OOM count said so). */
export function outOfMemory(runId: string, memoryBytes: number): RunFailure {
  return new RunFailure(
    "out-of-memory",
    `The replica exceeded its memory limit of ${
      memoryText(memoryBytes)
    } and was killed; it is replaced. Use less memory per call, or raise [hardware] memory`,
    { runId },
  );
}

/**
 * A replica that could not start serving: a 503 `app-unavailable`. `output` is what the app said about
 * it (main.py's traceback, or a custom server's last lines of output): for the deployer's build log,
 * never in a caller's problem document (a caller of the app may not be its author).
 */
export class AppStartError extends ProblemError {
  constructor(detail: string, readonly output: string[] = []) {
    super("app-unavailable", detail);
    this.name = "AppStartError";
  }
}
