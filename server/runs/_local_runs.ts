/** The runs executing in this process, so a cancel can reach them. */
import type { AbortSignalLike } from "../abort/mod.ts";

/** A run executing here. */
export interface LocalRun {
  /** Interrupts the run; it ends `cancelled`. */
  cancel(): void;
  /** Settles once the run's final state is buffered or written. */
  done: Promise<void>;
}

/** Runs executing in this process, by run id. */
export type LocalRuns = Map<string, LocalRun>;

/** The error of a run whose process stopped while it ran. */
export const INTERRUPTED = {
  type: "interrupted",
  message:
    "The server process running this run stopped before it finished; it was not run again because functions may have side effects",
  traceback: null,
};

/** The reason a run's signal is aborted with when it is cancelled. */
export class RunCancelled extends Error {
  constructor() {
    super("The run was cancelled");
    this.name = "RunCancelled";
  }
}

/** The reason a run's signal is aborted with when it outlives its grace period. */
export class RunTimedOut extends Error {
  constructor(graceMs: number) {
    super(`The run exceeded its response_grace_period of ${Math.round(graceMs / 1000)} s and was stopped`);
    this.name = "RunTimedOut";
  }
}

/** Settles with `promise`, or rejects with the signal's reason as soon as it aborts. */
export function untilAborted<T>(promise: Promise<T>, signal: AbortSignalLike): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
