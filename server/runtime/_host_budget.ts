/**
 * The host's budget of cores, memory and GPUs (RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY, the GPU
 * inventory): each replica reserves its app's `[hardware]` while it lives — its GPUs whole, held by no
 * other replica — and starts only if that fits. Pools that could not start one wait here and are woken,
 * in the order they began waiting, whenever a reservation is released; an idle replica of another app
 * (beyond its `min_replicas`) whose share would help is stopped to make room for one that waits.
 */
import type { Gpu } from "../gpus/mod.ts";
import { GpuAllocation, type GpuNeed } from "./_gpu_allocation.ts";

/** What one replica reserves. */
export interface HardwareNeed {
  cpu: number;
  memoryBytes: number;
  /** Whole GPUs (`gpu_count`); none when absent. */
  gpuCount?: number;
  /** The GPU model they must be (`compute`); any when absent (or `"CPU"`, which asks for none). */
  compute?: string;
}

/** A held share of the budget; `release()` once the replica's process is gone (extra calls are ignored). */
export interface Reservation {
  /** The GPUs it holds, no other replica's. */
  readonly gpus: readonly Gpu[];
  release(): void;
}

/** A pool as the budget sees it. */
export interface BudgetClient {
  /** Capacity was released: start what waits, if it fits now. */
  wake(): void;
  /**
   * Stops one idle replica beyond its `min_replicas` to make room, one whose reservation `helps` when
   * given; false when it has none.
   */
  evictIdle(helps?: (reservation: Reservation) => boolean): boolean;
}

/** Millicores: sums of fractional cores stay exact. */
function milli(cpu: number): number {
  return Math.round(cpu * 1000);
}

function gpuNeed(need: HardwareNeed): GpuNeed {
  return { count: need.gpuCount ?? 0, compute: need.compute === "CPU" ? undefined : need.compute };
}

/** The host's budget and who holds and waits for it. */
export class HostBudget {
  readonly total: HardwareNeed;
  /** The host's GPUs and which replica holds each. */
  readonly gpus: GpuAllocation;
  #cpuMilli = 0;
  #memoryBytes = 0;
  readonly #clients = new Set<BudgetClient>();
  /** Who waits, with what each needs (to stop only replicas whose share would help). */
  readonly #waiting = new Map<BudgetClient, HardwareNeed>();
  /** An eviction made for a waiting pool and not yet released: no second one is made meanwhile. */
  #evicting = false;

  constructor(total: HardwareNeed, options: { gpus?: readonly Gpu[] } = {}) {
    this.total = total;
    this.gpus = new GpuAllocation(options.gpus ?? []);
  }

  /** What the live replicas hold now. */
  get reserved(): HardwareNeed {
    return { cpu: this.#cpuMilli / 1000, memoryBytes: this.#memoryBytes };
  }

  /** Why one replica needing `need` could never start here (more than the whole budget); undefined if it could. */
  neverFits(need: HardwareNeed): string | undefined {
    if (milli(need.cpu) > milli(this.total.cpu)) {
      return `[hardware] cpu = ${need.cpu} is more than this host's RUNPLANE_HOST_CPU (${this.total.cpu} cores)`;
    }
    if (need.memoryBytes > this.total.memoryBytes) {
      const gib = (bytes: number) => Number((bytes / 1024 ** 3).toFixed(2));
      return `[hardware] memory = ${gib(need.memoryBytes)} GiB is more than this host's RUNPLANE_HOST_MEMORY (${
        gib(this.total.memoryBytes)
      } GiB)`;
    }
    return undefined;
  }

  /** Whether `need` would fit now (as `tryReserve` would find), without reserving it. */
  fits(need: HardwareNeed): boolean {
    const cpu = milli(need.cpu);
    if (this.#cpuMilli + cpu > milli(this.total.cpu) || this.#memoryBytes + need.memoryBytes > this.total.memoryBytes) {
      return false;
    }
    return !this.gpus.short(gpuNeed(need));
  }

  /** Reserves `need` (cores, memory and whole GPUs of its model) if it fits now; null otherwise. */
  tryReserve(need: HardwareNeed): Reservation | null {
    const cpu = milli(need.cpu);
    if (this.#cpuMilli + cpu > milli(this.total.cpu) || this.#memoryBytes + need.memoryBytes > this.total.memoryBytes) {
      return null;
    }
    const gpus = this.gpus.take(gpuNeed(need));
    if (!gpus) return null;
    this.#cpuMilli += cpu;
    this.#memoryBytes += need.memoryBytes;
    let released = false;
    return {
      gpus,
      release: () => {
        if (released) return;
        released = true;
        this.#cpuMilli -= cpu;
        this.#memoryBytes -= need.memoryBytes;
        this.gpus.give(gpus);
        this.#evicting = false;
        for (const client of [...this.#waiting.keys()]) client.wake();
      },
    };
  }

  /**
   * Whether releasing `reservation` would help a replica needing `need`: when GPUs are what it lacks,
   * only one holding GPUs of its model does; otherwise any (cores and memory are alike).
   */
  #helps(reservation: Reservation, need: HardwareNeed): boolean {
    const gpus = gpuNeed(need);
    return !this.gpus.short(gpus) || this.gpus.helps(reservation.gpus, gpus);
  }

  /** Lets `client`'s idle replicas be stopped for others; `leave` when it is gone. */
  join(client: BudgetClient): void {
    this.#clients.add(client);
  }

  leave(client: BudgetClient): void {
    this.#clients.delete(client);
    this.#waiting.delete(client);
  }

  /**
   * `client` could not start a replica needing `need`: it is woken at each release until `satisfied`,
   * and one idle replica of another client whose share would help is stopped to make room (unless one
   * is being stopped already).
   */
  wait(client: BudgetClient, need: HardwareNeed): void {
    this.#waiting.set(client, need);
    if (this.#evicting) return;
    for (const other of this.#clients) {
      if (other !== client && other.evictIdle((reservation) => this.#helps(reservation, need))) {
        this.#evicting = true;
        return;
      }
    }
  }

  /**
   * Whether a client other than `client` waits for room that releasing `reservation` would help (an
   * idle replica of `client` holding it should make it); any room at all when no reservation is given.
   */
  othersWait(client: BudgetClient, reservation?: Reservation): boolean {
    for (const [other, need] of this.#waiting) {
      if (other !== client && (!reservation || this.#helps(reservation, need))) return true;
    }
    return false;
  }

  /** `client` no longer waits. */
  satisfied(client: BudgetClient): void {
    this.#waiting.delete(client);
  }
}
