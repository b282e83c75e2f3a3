/**
 * Deadlines for outgoing calls. `AbortSignal.any([AbortSignal.timeout(ms), parent])` looks equivalent
 * but is not safe on Node 20: the timeout signal is held only weakly and may be garbage-collected before
 * it fires, so a hanging peer is never timed out (nodejs/node#57736). Here the timer holds the
 * controller strongly until `clear()`.
 */
import { type AbortSignalLike, LightAbortController } from "../abort/mod.ts";

/** A running deadline. */
export interface Deadline<S extends AbortSignalLike = AbortSignal> {
  /** Aborts when the time is up (reason: a `TimeoutError` DOMException) or the parent signal aborts. */
  readonly signal: S;
  /** Whether the time ran out (as opposed to the parent aborting, or nothing yet). */
  readonly timedOut: boolean;
  /** Stops the timer and lets go of the parent; call once the call is over. */
  clear(): void;
}

/** Options of `startDeadline` and `startLightDeadline`. */
export interface DeadlineOptions {
  /** A parent: the deadline also ends when it aborts. */
  signal?: AbortSignalLike;
}

/** Starts a deadline of `timeoutMs`, also ended by `options.signal`; its signal is an `AbortSignal` (for `fetch` and the like). */
export function startDeadline(timeoutMs: number, options: DeadlineOptions = {}): Deadline {
  return deadlineOn(new AbortController(), timeoutMs, options);
}

/**
 * Like `startDeadline`, with a `LightAbortController` for a signal (see ../abort/mod.ts): for per-call
 * code that reacts to the abort itself instead of handing the signal to a platform API.
 */
export function startLightDeadline(timeoutMs: number, options: DeadlineOptions = {}): Deadline<AbortSignalLike> {
  return deadlineOn(new LightAbortController(), timeoutMs, options);
}

function deadlineOn<S extends AbortSignalLike>(
  controller: { signal: S; abort(reason: unknown): void },
  timeoutMs: number,
  options: DeadlineOptions,
): Deadline<S> {
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
