/**
 * A replica that could not be given a process (its cgroup could not be made): its calls fail with why,
 * and its pool forgets it at once, as it does a replica that failed to start.
 */
import type { CallOutcome } from "./_outcome.ts";
import type { CallableReplica, ReplicaCall } from "./_replica.ts";

/** A replica whose start failed before any process ran; `ready` rejects with `error`. */
export class FailedReplica implements CallableReplica {
  readonly pid = undefined;
  readonly ready: Promise<void>;
  readonly exited = Promise.resolve();
  readonly wasReady = false;
  readonly usable = false;

  constructor(error: Error) {
    this.ready = Promise.reject(error);
    this.ready.catch(() => undefined);
  }

  /** Never runs: it is never ready, so no call should reach it; one that does is refused (its slot freed). */
  call(call: ReplicaCall): Promise<CallOutcome> {
    call.onSettled();
    return Promise.reject(new Error("a replica that failed to start was given a call"));
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}
