/** The custom runtime's `url` form: calls go to an upstream the platform does not start. */
import type { GuardOptions } from "../webhooks/mod.ts";
import type { Upstream } from "./_custom_replica.ts";

/** Options of `UrlUpstream`. */
export interface UrlUpstreamOptions {
  /**
   * The destination rules every call is checked against when it connects (a deployed app's url); none
   * for an app of the operator's apps folder, which may name any address.
   */
  guard?: GuardOptions;
}

/** A remote upstream: no process, always ready until stopped. */
export class UrlUpstream implements Upstream {
  readonly pid = undefined;
  readonly ready = Promise.resolve();
  readonly wasReady = true;
  readonly usable = true;
  readonly exited: Promise<void>;
  readonly guard: GuardOptions | undefined;
  #stop!: () => void;

  constructor(readonly baseUrl: string, options: UrlUpstreamOptions = {}) {
    this.guard = options.guard;
    this.exited = new Promise((resolve) => (this.#stop = resolve));
  }

  stop(): Promise<void> {
    this.#stop();
    return this.exited;
  }
}
