/**
 * When the follower of active deployments reads the store (see _local_apps.ts): at every wake-up
 * (`runplane_deployments`) and every poll, in rounds that run one at a time.
 */
import type { Logger } from "../log.ts";
import type { Notifier } from "../store/mod.ts";

/** Options of `SyncRounds`. */
export interface SyncRoundsOptions {
  logger: Logger;
  /** One read of the store (a failure is logged). */
  round(): Promise<void>;
  /** Whether the follower stopped: a round not yet begun then does nothing. */
  stopped(): boolean;
}

/** The reads of the store, one at a time. */
export class SyncRounds {
  readonly #options: SyncRoundsOptions;
  #tail: Promise<void> = Promise.resolve();
  #queued: Promise<void> | undefined;

  constructor(options: SyncRoundsOptions) {
    this.#options = options;
  }

  /** Resolves once a round that began after this call has ended. */
  sync(): Promise<void> {
    // A round not yet begun reads after this call: share it. Otherwise queue one after the current one,
    // so a caller never waits for more than two rounds however often polls and wake-ups come.
    if (this.#queued) return this.#queued;
    const round = this.#tail.then(async () => {
      this.#queued = undefined;
      if (this.#options.stopped()) return;
      await this.#options.round().catch((error) =>
        this.#options.logger.error({ err: error }, "reading the active deployments failed")
      );
    });
    this.#queued = round;
    this.#tail = round;
    return round;
  }

  /** Resolves once the last round queued has ended. */
  async ended(): Promise<void> {
    await this.#tail;
  }
}

/** Calls `sync` at every wake-up and every `pollMs` (default 2 s); returns what stops that. */
export function watchStore(notifier: Notifier, options: { pollMs?: number; sync(): Promise<void> }): () => void {
  const unlisten = notifier.listen("runplane_deployments", () => void options.sync());
  const timer = setInterval(() => void options.sync(), options.pollMs ?? 2000);
  timer.unref();
  return () => {
    clearInterval(timer);
    unlisten();
  };
}
