/**
 * The seats this host holds of each app's cluster-wide replica count (issue 31). A seat is the right to
 * run one replica: seats 0..max_replicas-1 of an app exist across the cluster, a host claims one in the
 * store before it starts a replica, and the seats below `min_replicas` are the warm ones. On this host an
 * app's pool may run as many replicas as it holds seats and keeps warm as many as it holds warm seats.
 * The book only counts; claiming and releasing seats in the store is the cluster registry's.
 */
import type { ReplicaLimits, ReplicaLoad } from "./_replica_pool.ts";

/** One held seat as the cluster sees it: the replica it stands for, ready or starting, and its calls. */
export interface HeldSeat {
  projectId: string;
  appId: string;
  seat: number;
  state: "starting" | "ready";
  busy: number;
}

/** The seats held per app (`project/app`). */
export class SeatBook {
  readonly #held = new Map<string, number[]>();

  /** The seats held of `key`, lowest first. */
  held(key: string): readonly number[] {
    return this.#held.get(key) ?? [];
  }

  /** Every app with seats held. */
  keys(): string[] {
    return [...this.#held.keys()];
  }

  add(key: string, seat: number): void {
    const seats = this.#held.get(key) ?? [];
    if (!seats.includes(seat)) seats.push(seat);
    this.#held.set(key, seats.sort((a, b) => a - b));
  }

  remove(key: string, seat: number): void {
    const seats = (this.#held.get(key) ?? []).filter((s) => s !== seat);
    if (seats.length > 0) this.#held.set(key, seats);
    else this.#held.delete(key);
  }

  /** What the app's pool may run and keeps warm with the seats held: warm seats are those below `minReplicas`. */
  limits(key: string, minReplicas: number): ReplicaLimits {
    const seats = this.held(key);
    return { minReplicas: seats.filter((seat) => seat < minReplicas).length, maxReplicas: seats.length };
  }

  /**
   * The seats of `key` no replica needs: held beyond the replicas alive and the warm ones, highest (and
   * not warm) first. Removed from the book; the caller releases them in the store.
   */
  surplus(key: string, options: { alive: number; minReplicas: number }): number[] {
    const seats = [...this.held(key)];
    const warm = seats.filter((seat) => seat < options.minReplicas).length;
    const keep = Math.max(options.alive, warm);
    const spare = seats.filter((seat) => seat >= options.minReplicas).reverse()
      .concat(seats.filter((seat) => seat < options.minReplicas).reverse())
      .slice(0, Math.max(0, seats.length - keep));
    for (const seat of spare) this.remove(key, seat);
    return spare;
  }

  /** Each held seat with the load of the replica it stands for (seats and replicas paired in order). */
  states(key: string, loads: readonly ReplicaLoad[]): HeldSeat[] {
    const [projectId, appId] = splitKey(key);
    return this.held(key).map((seat, i) => ({
      projectId,
      appId,
      seat,
      state: loads[i]?.ready ? "ready" : "starting",
      busy: loads[i]?.active ?? 0,
    }));
  }
}

/** `project/app` → its two parts (an app name has no slash). */
export function splitKey(key: string): [string, string] {
  const at = key.indexOf("/");
  return [key.slice(0, at), key.slice(at + 1)];
}
