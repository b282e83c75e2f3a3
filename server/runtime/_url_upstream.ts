/** The custom runtime's `url` form: calls go to an upstream the platform does not start. */
import type { GuardOptions } from "../webhooks/mod.ts";
import type { CallOutcome } from "./_outcome.ts";
import { proxyReplicaCall } from "./_replica_proxy.ts";
import type { CallableReplica, ReplicaCall } from "./_replica.ts";

/** Options of `UrlUpstream`. */
export interface UrlUpstreamOptions {
  /**
   * The destination rules every call is checked against when it connects (a deployed app's url); none
   * for an app of the operator's apps folder, which may name any address.
   */
  guard?: GuardOptions;
}

/** A remote upstream: no process, always ready until stopped. */
export class UrlUpstream implements CallableReplica {
  readonly pid = undefined;
  readonly ready = Promise.resolve();
  readonly wasReady = true;
  readonly exited: Promise<void>;
  readonly guard: GuardOptions | undefined;
  #stopped = false;
  #stop!: () => void;

  constructor(readonly baseUrl: string, options: UrlUpstreamOptions = {}) {
    this.guard = options.guard;
    this.exited = new Promise((resolve) => (this.#stop = resolve));
  }

  /** True until `stop()`: nothing of it runs here, so nothing else ends it. */
  get usable(): boolean {
    return !this.#stopped;
  }

  /** Forwards the call to the url (`proxyCall`), checked against `guard` as it connects. */
  call(call: ReplicaCall): Promise<CallOutcome> {
    return proxyReplicaCall(call, { baseUrl: this.baseUrl, guard: this.guard });
  }

  stop(): Promise<void> {
    this.#stopped = true;
    this.#stop();
    return this.exited;
  }
}
