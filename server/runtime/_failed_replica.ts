/**
 * A replica that could not be given a process (its cgroup could not be made): its calls fail with why,
 * and its pool forgets it at once, as it does a replica that failed to start.
 */
import type { Replica } from "./_replica_pool.ts";

/** A replica whose start failed before any process ran; `ready` rejects with `error`. */
export class FailedReplica implements Replica {
  readonly pid = undefined;
  readonly ready: Promise<void>;
  readonly exited = Promise.resolve();
  readonly wasReady = false;
  readonly usable = false;

  constructor(error: Error) {
    this.ready = Promise.reject(error);
    this.ready.catch(() => undefined);
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }
}
