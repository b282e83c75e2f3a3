/**
 * Deadlines for outgoing calls. `AbortSignal.any([AbortSignal.timeout(ms), parent])` looks equivalent
 * but is not safe on Node 20: the timeout signal is held only weakly and may be garbage-collected before
 * it fires, so a hanging peer is never timed out (nodejs/node#57736). Here the timer holds the
 * controller strongly until `clear()`.
 */
import type { AbortSignalLike } from "../abort/mod.ts";

/** A running deadline. */
export interface Deadline {
  /** Aborts when the time is up (reason: a `TimeoutError` DOMException) or the parent signal aborts. */
  readonly signal: AbortSignal;
  /** Whether the time ran out (as opposed to the parent aborting, or nothing yet). */
  readonly timedOut: boolean;
  /** Stops the timer and lets go of the parent; call once the call is over. */
  clear(): void;
}

/** Starts a deadline of `timeoutMs`, also ended by `options.signal`. */
export function startDeadline(timeoutMs: number, options: { signal?: AbortSignalLike } = {}): Deadline {
  const controller = new AbortController();
  const parent = options.signal;
  let timedOut = false;
  const onParentAbort = () => controller.abort(parent!.reason);
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new DOMException(`The operation timed out after ${timeoutMs} ms`, "TimeoutError"));
  }, timeoutMs);
  if (parent?.aborted) controller.abort(parent.reason);
  else parent?.addEventListener("abort", onParentAbort, { once: true });
  return {
    signal: controller.signal,
    get timedOut() {
      return timedOut;
    },
    clear() {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onParentAbort);
    },
  };
}
