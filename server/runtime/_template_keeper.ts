/**
 * Decides, for one app version, whether a new Python replica is forked from its template or cold-started,
 * and how long the template lives: while the app keeps `min_replicas > 0`, or while forks of it run and
 * for a cooldown after the last one. A template that reports a fork would be unsafe is logged once and
 * never started again for that version; its replicas cold-start.
 */
import type { ReplicaCgroup } from "../sandbox/mod.ts";
import type { Reservation } from "./_host_budget.ts";
import { type ForkOptions, ReplicaTemplate, TemplateRefused } from "./_replica_template.ts";
import type { WorkerProcess, WorkerSpec } from "./_worker_process.ts";

/** Options of `TemplateKeeper`. */
export interface TemplateKeeperOptions extends WorkerSpec {
  /** Keep the template while the app lives (`min_replicas > 0`), else only while used. */
  keep: boolean;
  cooldownMs: number;
  /** Reserves the template's memory on the host; null when there is no room (replicas cold-start then). */
  reserve(): Reservation | null;
  /** Makes the template's cgroup (the app's limits); throws when it cannot be made. */
  cgroup(): ReplicaCgroup | undefined;
}

/** One app version's template, started on first need. */
export class TemplateKeeper {
  readonly #options: TemplateKeeperOptions;
  #template: ReplicaTemplate | undefined;
  /** Why forks are off for this version (logged once), or undefined. */
  #refused: string | undefined;
  #idle: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(options: TemplateKeeperOptions) {
    this.#options = options;
  }

  /** A replica's process: forked from the template when it can fork, else `cold()`. */
  async start(fork: ForkOptions, cold: () => WorkerProcess): Promise<WorkerProcess> {
    const template = this.#current();
    if (!template) return cold();
    clearTimeout(this.#idle);
    try {
      return await template.fork(fork);
    } catch (error) {
      if (!(error instanceof TemplateRefused)) throw error;
      this.#refuse(template, error);
      return cold();
    }
  }

  /** Stops the template once its forks are gone (the app version is retired or the server closes). */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#idle);
    await this.#template?.close();
  }

  #refuse(template: ReplicaTemplate, error: TemplateRefused): void {
    const { logger, label } = this.#options;
    if (error.kind === "gone" && template.wasLoaded) {
      // It ended after it had loaded (killed, out of memory): the next replica starts a new one.
      if (this.#template === template) this.#template = undefined;
      return;
    }
    if (this.#refused !== undefined) return;
    this.#refused = error.message;
    if (error.kind === "unsafe") {
      logger.warn(
        { app: label, reason: error.message },
        "forking this app's template would be unsafe; its replicas cold-start (see Cold starts in docs/runplane-toml.md)",
      );
    } else {logger.info(
        { app: label, reason: error.message },
        "this app's template did not load; its replicas cold-start",
      );}
    void template.close();
  }

  #current(): ReplicaTemplate | undefined {
    if (this.#refused !== undefined || this.#closed) return undefined;
    if (this.#template?.usable) return this.#template;
    const reservation = this.#options.reserve();
    if (!reservation) return undefined;
    let cgroup: ReplicaCgroup | undefined;
    try {
      cgroup = this.#options.cgroup();
    } catch (error) {
      reservation.release();
      this.#options.logger.warn({ app: this.#options.label, err: error }, "the template's cgroup could not be made");
      return undefined;
    }
    const template = new ReplicaTemplate({ ...this.#options, cgroup });
    this.#template = template;
    this.#options.logger.info({ app: this.#options.label }, "template starting");
    template.onIdle = () => this.#onIdle(template);
    void template.exited.then(async () => {
      reservation.release();
      if (this.#template === template) this.#template = undefined;
      await cgroup?.remove();
    });
    return template;
  }

  #onIdle(template: ReplicaTemplate): void {
    if (this.#options.keep && !this.#closed) return;
    clearTimeout(this.#idle);
    this.#idle = setTimeout(() => {
      if (template.forks > 0) return;
      if (this.#template === template) this.#template = undefined;
      this.#options.logger.info({ app: this.#options.label }, "template stopping (cooldown)");
      void template.close();
    }, this.#closed ? 0 : this.#options.cooldownMs);
    this.#idle.unref?.();
  }
}
