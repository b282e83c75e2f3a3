/**
 * The run-change feed's outgoing changes: those of watched projects collect for `flushMs`, then go out
 * on `runplane_run_events` in as few payloads as the NOTIFY limit allows.
 */
import type { Logger } from "../log.ts";
import type { Notifier } from "../store/mod.ts";
import { changePayloads } from "./_change_payloads.ts";
import type { RunChange } from "./_change_types.ts";
import type { WatchedProjects } from "./_watched_projects.ts";

/** What `ChangeOutbox` needs. */
export interface ChangeOutboxOptions {
  notifier: Pick<Notifier, "notify">;
  logger: Logger;
  /** Which projects' changes are sent. */
  watch: Pick<WatchedProjects, "watched">;
  /** How long changes collect before they are sent. */
  flushMs: number;
}

/** Collects and sends run changes. */
export class ChangeOutbox {
  readonly #options: ChangeOutboxOptions;
  #pending: RunChange[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: ChangeOutboxOptions) {
    this.#options = options;
  }

  /** Sends `change` with the next batch, when its project is watched. */
  publish(change: RunChange): void {
    if (!this.#options.watch.watched(change.project_id)) return;
    this.#pending.push(change);
    this.#timer ??= setTimeout(() => void this.flush(), this.#options.flushMs);
  }

  /** Sends what is pending now. */
  async flush(): Promise<void> {
    const { notifier, logger } = this.#options;
    this.#timer = undefined;
    const changes = this.#pending;
    this.#pending = [];
    for (const payload of changePayloads(changes)) {
      await notifier.notify("runplane_run_events", payload).catch((error) =>
        logger.warn({ err: error }, "announcing run changes failed; pages show them on their next read")
      );
    }
  }

  /** Stops the timer of the next batch (`flush` still sends it). */
  stopTimer(): void {
    if (this.#timer) clearTimeout(this.#timer);
  }
}
