/**
 * Slots and replicas of one app version: at most `maxReplicas × slotsPerReplica` calls at once, more
 * wait in a bounded queue, replicas start on demand, `minReplicas` stay warm, idle ones stop after the
 * cooldown. Independent of what a replica runs (Python worker, custom server, remote URL).
 */
import type { AbortSignalLike } from "../abort/mod.ts";
import type { Logger } from "../log.ts";
import { ProblemError } from "../problems/mod.ts";
import type { Gpu } from "../gpus/mod.ts";
import type { BudgetClient, HardwareNeed, HostBudget, Reservation } from "./_host_budget.ts";

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
  /** Replicas the app would start now but the host's budget has no room for (their calls wait). */
  waitingForCapacity: number;
}

/** How many of a pool's replicas are starting, idle and busy. */
export interface ReplicaStates {
  starting: number;
  idle: number;
  busy: number;
}

/** What a new replica was given of the host: the GPUs it alone holds while it lives. */
export interface ReplicaGrant {
  gpus: readonly Gpu[];
}

/** A live replica's GPUs. */
export interface ReplicaGpus {
  /** Its process id on this host, when it has a process. */
  pid: number | undefined;
  gpus: readonly Gpu[];
}

/** One live replica's load: whether it is ready, and its calls running. */
export interface ReplicaLoad {
  ready: boolean;
  active: number;
}

/** How many replicas a pool keeps warm and may run (a cluster's seats held on this host, issue 31). */
export interface ReplicaLimits {
  minReplicas: number;
  maxReplicas: number;
}

/** Options of `ReplicaPool`. */
export interface ReplicaPoolOptions<R extends Replica> {
  label: string;
  minReplicas: number;
  maxReplicas: number;
  slotsPerReplica: number;
  cooldownMs: number;
  queueLimit: number;
  /** Starts a replica with what the host's budget gave it. */
  spawn(grant: ReplicaGrant): R;
  logger: Logger;
  /** Called once the pool is done with (closed, or retired and empty): stop what serves its replicas. */
  onDetach?(): void;
  /** The host's budget and what each replica reserves of it; without it replicas start whenever wanted. */
  budget?: { host: HostBudget; need: HardwareNeed };
  /** Told each time its load changes: a slot granted or released, a replica ready or gone. */
  onChange?(): void;
}

interface Entry<R> {
  replica: R;
  active: number;
  stopping: boolean;
  startedAt: number;
  cooldown?: ReturnType<typeof setTimeout>;
  /** Its share of the host's budget, released once its process is gone. */
  reservation?: Reservation;
}

interface Waiter<R extends Replica> {
  resolve(lease: Lease<R>): void;
  reject(error: unknown): void;
}

/** The replicas and slots of one app version. */
export class ReplicaPool<R extends Replica> implements BudgetClient {
  readonly #options: ReplicaPoolOptions<R>;
  /** `minReplicas` and `maxReplicas`: the options' at first, changed by `setLimits`. */
  #limits: ReplicaLimits;
  readonly #entries: Entry<R>[] = [];
  readonly #waiters: Waiter<R>[] = [];
  #busy = 0;
  #draining = false;
  /** Set when a replica could not start for want of host capacity, until one could. */
  #blocked = false;
  /** Replicas started since the pool was made (each a cold start or a fork of its template). */
  #starts = 0;

  constructor(options: ReplicaPoolOptions<R>) {
    this.#options = options;
    this.#limits = { minReplicas: options.minReplicas, maxReplicas: options.maxReplicas };
    options.budget?.host.join(this);
    this.#keepWarm();
  }

  /** Replicas this pool has started, ever: the app's charts count cold starts from it. */
  starts(): number {
    return this.#starts;
  }

  /** The pool's current load. */
  capacity(): Capacity {
    return {
      slots: this.#slots(),
      busy: this.#busy,
      queued: this.#waiters.length,
      queueLimit: this.#options.queueLimit,
      replicas: this.#alive(),
      waitingForCapacity: this.#waitingForCapacity(),
    };
  }

  #slots(): number {
    return this.#limits.maxReplicas * this.#options.slotsPerReplica;
  }

  /** Replicas alive and taking calls (starting or ready). */
  #alive(): number {
    return this.#entries.filter((e) => !e.stopping && e.replica.usable).length;
  }

  #waitingForCapacity(): number {
    if (!this.#blocked) return 0;
    const alive = this.#alive();
    const warm = Math.max(0, this.#limits.minReplicas - alive);
    const forCalls = Math.min(
      Math.ceil(this.#waiters.length / this.#options.slotsPerReplica),
      this.#limits.maxReplicas - alive,
    );
    return Math.max(warm, forCalls, 1);
  }

  /** The replicas it keeps warm and may run now. */
  get limits(): ReplicaLimits {
    return { ...this.#limits };
  }

  /**
   * Changes how many replicas it keeps warm and may run (the seats this host holds of a cluster-wide
   * count). Raised: queued calls get the new slots, and warm replicas start. Lowered: idle replicas past
   * the new limit stop now, busy ones once their calls end; queued calls wait for a slot under the new limit.
   */
  setLimits(limits: ReplicaLimits): void {
    this.#limits = { ...limits };
    for (const entry of [...this.#entries].reverse()) {
      if (this.#alive() <= this.#limits.maxReplicas) break;
      if (!entry.stopping && entry.active === 0) this.#stopEntry(entry, "its seat is gone");
    }
    this.#serveWaiters();
    this.#keepWarm();
    this.#settleBlocked();
  }

  /** Each live replica's load, oldest first (stopping ones left out). */
  loads(): ReplicaLoad[] {
    return this.#entries.filter((e) => !e.stopping && e.replica.usable)
      .map((e) => ({ ready: e.replica.wasReady, active: e.active }));
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

  /** The GPUs each replica holds (those whose process is not gone yet, stopping ones included). */
  gpus(): ReplicaGpus[] {
    return this.#entries.filter((entry) => (entry.reservation?.gpus.length ?? 0) > 0)
      .map((entry) => ({ pid: entry.replica.pid, gpus: entry.reservation!.gpus }));
  }

  /** A slot now, or null when every slot is busy or no replica can start (never queues). */
  tryAcquire(): Lease<R> | null {
    if (this.#draining || this.#busy >= this.#slots() || this.#waiters.length > 0) return null;
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
          `${this.#options.label} has ${this.#waiters.length} calls waiting already${
            this.#blocked ? " (for room on this host: RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY, GPUs)" : ""
          }; retry later`,
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
        this.#settleBlocked();
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
    this.#settleBlocked();
  }

  /** Leaves the host's budget (the pool is gone: retired and empty, or closed). */
  detach(): void {
    this.#options.budget?.host.leave(this);
    this.#options.onDetach?.();
  }

  /** The host's budget was released: start what waits, if it fits now. */
  wake(): void {
    this.#serveWaiters();
    this.#keepWarm();
    this.#settleBlocked();
  }

  /** No longer waits for host capacity once no call waits and `min_replicas` are up (or it drains). */
  #settleBlocked(): void {
    if (this.#waiters.length > 0) return;
    if (this.#draining || this.#alive() >= this.#limits.minReplicas) this.#unblock();
  }

  /** Stops one idle replica beyond `min_replicas` whose share `helps` (for another app that waits for capacity). */
  evictIdle(helps?: (reservation: Reservation) => boolean): boolean {
    const alive = this.#entries.filter((e) => !e.stopping).length;
    if (alive <= this.#limits.minReplicas && !this.#draining) return false;
    const idle = this.#entries.find((e) =>
      !e.stopping && e.active === 0 && e.replica.wasReady && (!helps || (e.reservation && helps(e.reservation)))
    );
    if (!idle) return false;
    void this.#stopEntry(idle, "making room for another app");
    return true;
  }

  /** Settles once every replica started so far is ready or has failed to start (min_replicas warm-up). */
  async warm(): Promise<void> {
    await Promise.allSettled(this.#entries.map((entry) => entry.replica.ready));
  }

  /** Stops every replica now; queued calls fail with 503. */
  async close(): Promise<void> {
    this.#draining = true;
    this.detach();
    for (const waiter of this.#waiters.splice(0)) {
      waiter.reject(
        new ProblemError("service-unavailable", "The server is shutting down; retry on another server", {}),
      );
    }
    await Promise.all(this.#entries.map((entry) => this.#stopEntry(entry, "server closing")));
  }

  /** A slot on the least busy replica, or on a new one; null when none can start (host capacity). */
  #grant(): Lease<R> | null {
    const live = this.#entries.filter((e) =>
      !e.stopping && e.replica.usable && e.active < this.#options.slotsPerReplica
    );
    let entry = live.sort((a, b) => a.active - b.active)[0];
    if (!entry) {
      const started = this.#start("cold start");
      if (!started) return null;
      entry = started;
    }
    this.#busy++;
    clearTimeout(entry.cooldown);
    entry.active++;
    this.#options.onChange?.();
    let released = false;
    return {
      replica: entry.replica,
      release: () => {
        if (released) return;
        released = true;
        entry.active--;
        this.#busy--;
        this.#afterRelease(entry);
        this.#options.onChange?.();
      },
    };
  }

  /** Gives queued calls the slots there are (or replicas that can start), oldest first. */
  #serveWaiters(): void {
    while (this.#waiters.length > 0 && this.#busy < this.#slots()) {
      const lease = this.#grant();
      if (!lease) return;
      this.#waiters.shift()!.resolve(lease);
    }
  }

  #afterRelease(entry: Entry<R>): void {
    this.#serveWaiters();
    if (entry.active > 0 || entry.stopping) return;
    if (this.#draining && this.#waiters.length === 0) {
      this.#stopEntry(entry, "drained");
      return;
    }
    if (this.#alive() > this.#limits.maxReplicas) {
      this.#stopEntry(entry, "its seat is gone");
      return;
    }
    // Idle while another app waits for host capacity: its room is worth more there than a warm replica here.
    const alive = this.#entries.filter((e) => !e.stopping).length;
    if (alive > this.#limits.minReplicas && this.#options.budget?.host.othersWait(this, entry.reservation)) {
      this.#stopEntry(entry, "making room for another app");
      return;
    }
    clearTimeout(entry.cooldown);
    entry.cooldown = setTimeout(() => {
      const alive = this.#entries.filter((e) => !e.stopping).length;
      if (entry.active === 0 && alive > this.#limits.minReplicas) this.#stopEntry(entry, "cooldown");
    }, this.#options.cooldownMs);
    entry.cooldown.unref?.();
  }

  /** Starts a replica if the host's budget has room for it; null (and waits for room) otherwise. */
  #start(reason: string): Entry<R> | null {
    const budget = this.#options.budget;
    const reservation = budget ? budget.host.tryReserve(budget.need) : undefined;
    if (reservation === null) {
      if (!this.#blocked) {
        this.#blocked = true;
        this.#options.logger.info(
          { app: this.#options.label, reason, reserved: budget!.host.reserved, need: budget!.need },
          "replica waits for host capacity",
        );
      }
      budget!.host.wait(this, budget!.need);
      return null;
    }
    this.#unblock();
    const replica = this.#options.spawn({ gpus: reservation?.gpus ?? [] });
    this.#starts++;
    const entry: Entry<R> = { replica, active: 0, stopping: false, startedAt: Date.now(), reservation };
    this.#entries.push(entry);
    this.#options.logger.info({ app: this.#options.label, pid: replica.pid, reason }, "replica starting");
    replica.ready.then(() => this.#options.onChange?.(), () => undefined);
    void replica.exited.then(() => this.#onExit(entry));
    return entry;
  }

  #unblock(): void {
    if (!this.#blocked) return;
    this.#blocked = false;
    this.#options.budget?.host.satisfied(this);
  }

  #onExit(entry: Entry<R>): void {
    clearTimeout(entry.cooldown);
    const index = this.#entries.indexOf(entry);
    if (index >= 0) this.#entries.splice(index, 1);
    entry.reservation?.release();
    this.#options.onChange?.();
    if (entry.stopping || this.#draining) return;
    this.#options.logger.warn({ app: this.#options.label, pid: entry.replica.pid }, "replica exited unexpectedly");
    // Replace a replica that had served, not one that failed to start or died at once (that would loop);
    // the next call starts one on demand then.
    // Not past max_replicas: a call may have started one already while this one was dying.
    if (entry.replica.wasReady && Date.now() - entry.startedAt > 1000 && this.#alive() < this.#limits.maxReplicas) {
      this.#start("replacing an exited replica");
    }
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
    while (this.#entries.filter((e) => !e.stopping).length < this.#limits.minReplicas) {
      if (!this.#start("min_replicas")) return;
    }
  }
}
