/**
 * The host's budget of cores and memory (RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY): each replica reserves
 * its app's `[hardware]` while it lives, and starts only if that fits. Pools that could not start one wait
 * here and are woken, in the order they began waiting, whenever a reservation is released; an idle replica
 * of another app (beyond its `min_replicas`) is stopped to make room for one that waits.
 */

/** What one replica reserves. */
export interface HardwareNeed {
  cpu: number;
  memoryBytes: number;
}

/** A held share of the budget; `release()` once the replica's process is gone (extra calls are ignored). */
export interface Reservation {
  release(): void;
}

/** A pool as the budget sees it. */
export interface BudgetClient {
  /** Capacity was released: start what waits, if it fits now. */
  wake(): void;
  /** Stops one idle replica beyond its `min_replicas` to make room; false when it has none. */
  evictIdle(): boolean;
}

/** Millicores: sums of fractional cores stay exact. */
function milli(cpu: number): number {
  return Math.round(cpu * 1000);
}

/** The host's budget and who holds and waits for it. */
export class HostBudget {
  readonly total: HardwareNeed;
  #cpuMilli = 0;
  #memoryBytes = 0;
  readonly #clients = new Set<BudgetClient>();
  readonly #waiting = new Set<BudgetClient>();
  /** An eviction made for a waiting pool and not yet released: no second one is made meanwhile. */
  #evicting = false;

  constructor(total: HardwareNeed) {
    this.total = total;
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

  /** Reserves `need` if it fits now; null otherwise. */
  tryReserve(need: HardwareNeed): Reservation | null {
    const cpu = milli(need.cpu);
    if (this.#cpuMilli + cpu > milli(this.total.cpu) || this.#memoryBytes + need.memoryBytes > this.total.memoryBytes) {
      return null;
    }
    this.#cpuMilli += cpu;
    this.#memoryBytes += need.memoryBytes;
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#cpuMilli -= cpu;
        this.#memoryBytes -= need.memoryBytes;
        this.#evicting = false;
        for (const client of [...this.#waiting]) client.wake();
      },
    };
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
   * `client` could not start a replica: it is woken at each release until `satisfied`, and one idle
   * replica of another client is stopped to make room (unless one is being stopped already).
   */
  wait(client: BudgetClient): void {
    this.#waiting.add(client);
    if (this.#evicting) return;
    for (const other of this.#clients) {
      if (other !== client && other.evictIdle()) {
        this.#evicting = true;
        return;
      }
    }
  }

  /** Whether a client other than `client` waits for room (an idle replica of `client` should make it). */
  othersWait(client: BudgetClient): boolean {
    for (const other of this.#waiting) if (other !== client) return true;
    return false;
  }

  /** `client` no longer waits. */
  satisfied(client: BudgetClient): void {
    this.#waiting.delete(client);
  }
}
