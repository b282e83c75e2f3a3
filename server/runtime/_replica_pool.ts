/**
 * Slots and replicas of one app version: at most `maxReplicas × slotsPerReplica` calls at once, more
 * wait in a bounded queue, replicas start on demand, `minReplicas` stay warm, idle ones stop after the
 * cooldown. Independent of what a replica runs (Python worker, custom server, remote URL).
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";

/** One warm process (or a stand-in for a remote upstream). */
export interface Replica {
  /** The process id, when there is a process. */
  readonly pid: number | undefined;
  /** Resolves when the replica takes calls; rejects with why it could not start. */
  readonly ready: Promise<void>;
  /** Resolves when the replica is gone (exited, killed, stopped). */
  readonly exited: Promise<void>;
  /** Whether it became ready before exiting. */
  readonly wasReady: boolean;
  /** False once it is being killed: no new call may go to it. */
  readonly usable: boolean;
  /** Stops it: gently, then by force. */
  stop(): Promise<void>;
}

/** A claimed slot on a replica; `release()` exactly once when the call ends (extra calls are ignored). */
export interface Lease<R extends Replica = Replica> {
  readonly replica: R;
  release(): void;
}

/** How full an app is. */
export interface Capacity {
  /** Calls that may run at once (`max_replicas × replica_concurrency`). */
  slots: number;
  /** Calls running now. */
  busy: number;
  /** Calls waiting for a slot. */
  queued: number;
  /** Calls that may wait before new ones get 429. */
  queueLimit: number;
  /** Replicas alive now (starting or ready). */
  replicas: number;
}

/** How many of a pool's replicas are starting, idle and busy. */
export interface ReplicaStates {
  starting: number;
  idle: number;
  busy: number;
}

/** Options of `ReplicaPool`. */
export interface ReplicaPoolOptions<R extends Replica> {
  label: string;
  minReplicas: number;
  maxReplicas: number;
  slotsPerReplica: number;
  cooldownMs: number;
  queueLimit: number;
  spawn(): R;
  logger: Logger;
}

interface Entry<R> {
  replica: R;
  active: number;
  stopping: boolean;
  startedAt: number;
  cooldown?: ReturnType<typeof setTimeout>;
}

interface Waiter<R extends Replica> {
  resolve(lease: Lease<R>): void;
  reject(error: unknown): void;
}

/** The replicas and slots of one app version. */
export class ReplicaPool<R extends Replica> {
  readonly #options: ReplicaPoolOptions<R>;
  readonly #entries: Entry<R>[] = [];
  readonly #waiters: Waiter<R>[] = [];
  #busy = 0;
  #draining = false;

  constructor(options: ReplicaPoolOptions<R>) {
    this.#options = options;
    this.#keepWarm();
  }

  /** The pool's current load. */
  capacity(): Capacity {
    return {
      slots: this.#options.maxReplicas * this.#options.slotsPerReplica,
      busy: this.#busy,
      queued: this.#waiters.length,
      queueLimit: this.#options.queueLimit,
      replicas: this.#entries.filter((e) => !e.stopping && e.replica.usable).length,
    };
  }

  /** The app version's label (`project/app`). */
  get label(): string {
    return this.#options.label;
  }

  /** Live replicas by state: not ready yet, ready with no call, ready with at least one call. */
  states(): ReplicaStates {
    const states = { starting: 0, idle: 0, busy: 0 };
    for (const entry of this.#entries) {
      if (entry.stopping || !entry.replica.usable) continue;
      if (!entry.replica.wasReady) states.starting++;
      else if (entry.active > 0) states.busy++;
      else states.idle++;
    }
    return states;
  }

  /** A slot now, or null when every slot is busy (never queues). */
  tryAcquire(): Lease<R> | null {
    if (this.#draining || this.#busy >= this.capacity().slots) return null;
    return this.#grant();
  }

  /**
   * A slot: now, or after waiting in the queue. Throws a 429 `ProblemError` (with `Retry-After`) when
   * the queue is full; rejects with the signal's reason when it aborts while waiting.
   */
  acquire(signal?: AbortSignalLike): Promise<Lease<R>> {
    const lease = this.tryAcquire();
    if (lease) return Promise.resolve(lease);
    if (this.#waiters.length >= this.#options.queueLimit) {
      return Promise.reject(
        new ProblemError(
          "too-many-requests",
          `${this.#options.label} has ${this.#waiters.length} calls waiting already; retry later`,
          {
            headers: { "Retry-After": "1" },
          },
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const waiter: Waiter<R> = {
        resolve(lease) {
          signal?.removeEventListener("abort", onAbort);
          resolve(lease);
        },
        reject,
      };
      const onAbort = () => {
        const index = this.#waiters.indexOf(waiter);
        if (index >= 0) this.#waiters.splice(index, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.push(waiter);
    });
  }

  /** Takes no new calls; replicas stop once their calls end. Queued calls are served first. */
  drain(): void {
    this.#draining = true;
    for (const entry of this.#entries) if (entry.active === 0) this.#stopEntry(entry, "drained");
  }

  /** Settles once every replica started so far is ready or has failed to start (min_replicas warm-up). */
  async warm(): Promise<void> {
    await Promise.allSettled(this.#entries.map((entry) => entry.replica.ready));
  }

  /** Stops every replica now; queued calls fail with 503. */
  async close(): Promise<void> {
    this.#draining = true;
    for (const waiter of this.#waiters.splice(0)) {
      waiter.reject(
        new ProblemError("service-unavailable", "The server is shutting down; retry on another server", {}),
      );
    }
    await Promise.all(this.#entries.map((entry) => this.#stopEntry(entry, "server closing")));
  }

  #grant(): Lease<R> {
    this.#busy++;
    const live = this.#entries.filter((e) =>
      !e.stopping && e.replica.usable && e.active < this.#options.slotsPerReplica
    );
    let entry = live.sort((a, b) => a.active - b.active)[0];
    if (!entry) entry = this.#start("cold start");
    clearTimeout(entry.cooldown);
    entry.active++;
    let released = false;
    return {
      replica: entry.replica,
      release: () => {
        if (released) return;
        released = true;
        entry.active--;
        this.#busy--;
        this.#afterRelease(entry);
      },
    };
  }

  #afterRelease(entry: Entry<R>): void {
    const waiter = this.#waiters.shift();
    if (waiter) waiter.resolve(this.#grant());
    if (entry.active > 0 || entry.stopping) return;
    if (this.#draining && this.#waiters.length === 0) {
      this.#stopEntry(entry, "drained");
      return;
    }
    clearTimeout(entry.cooldown);
    entry.cooldown = setTimeout(() => {
      const alive = this.#entries.filter((e) => !e.stopping).length;
      if (entry.active === 0 && alive > this.#options.minReplicas) this.#stopEntry(entry, "cooldown");
    }, this.#options.cooldownMs);
    entry.cooldown.unref?.();
  }

  #start(reason: string): Entry<R> {
    const replica = this.#options.spawn();
    const entry: Entry<R> = { replica, active: 0, stopping: false, startedAt: Date.now() };
    this.#entries.push(entry);
    this.#options.logger.info({ app: this.#options.label, pid: replica.pid, reason }, "replica starting");
    replica.ready.catch(() => undefined);
    void replica.exited.then(() => this.#onExit(entry));
    return entry;
  }

  #onExit(entry: Entry<R>): void {
    clearTimeout(entry.cooldown);
    const index = this.#entries.indexOf(entry);
    if (index >= 0) this.#entries.splice(index, 1);
    if (entry.stopping || this.#draining) return;
    this.#options.logger.warn({ app: this.#options.label, pid: entry.replica.pid }, "replica exited unexpectedly");
    // Replace a replica that had served, not one that failed to start or died at once (that would loop);
    // the next call starts one on demand then.
    if (entry.replica.wasReady && Date.now() - entry.startedAt > 1000) this.#start("replacing an exited replica");
  }

  #stopEntry(entry: Entry<R>, reason: string): Promise<void> {
    if (entry.stopping) return entry.replica.exited;
    entry.stopping = true;
    clearTimeout(entry.cooldown);
    this.#options.logger.info({ app: this.#options.label, pid: entry.replica.pid, reason }, "replica stopping");
    return entry.replica.stop();
  }

  #keepWarm(): void {
    if (this.#draining) return;
    while (this.#entries.filter((e) => !e.stopping).length < this.#options.minReplicas) this.#start("min_replicas");
  }
}
