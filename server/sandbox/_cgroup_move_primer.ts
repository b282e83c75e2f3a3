/**
 * Starts, ahead of a replica's move into its cgroup, the wait that the move would begin with. Every move
 * (a pid written to a `cgroup.procs`) takes the kernel's `cgroup_threadgroup_rwsem` for writing, and that
 * waits for an RCU grace period unless another move ended within the last one (7–29 ms on the 2-core VM
 * of docs/performance.md; 0.1 ms right after another move). A replica pays it on the way to its first
 * call: its shell's join, or the server's move of a fork into the replica's own cgroup. The primer writes
 * this server's pid into the cgroup it is already in: a move that changes nothing, made on the threadpool
 * while the replica is being started, so the replica's own move a few milliseconds later finds the lock
 * ready (or waits out only the rest of the same grace period). A host setting would do it for every move
 * (`rcu_expedited`, `cgroup_favordynmods`: docs/operating.md); this asks nothing of the host.
 */
import { closeSync, openSync, readFileSync, write } from "node:fs";

/** Where the server's own membership is read; a prime changes nothing only while it is unchanged. */
const SELF_CGROUP = "/proc/self/cgroup";

/** Primes cgroup moves by moving this server into the cgroup it is in (see the module's comment). */
export class CgroupMovePrimer {
  readonly #procsFile: string;
  readonly #membership: string;
  #fd: number | undefined;
  #inFlight: Promise<void> | undefined;
  #off = false;
  #closing = false;

  /** `procsFile`: the `cgroup.procs` of the cgroup this server is in (one hierarchy is enough: one lock). */
  constructor(procsFile: string) {
    this.#procsFile = procsFile;
    this.#membership = readFileSync(SELF_CGROUP, "utf8");
  }

  /** Whether primes are still made (off for good after one failed, or once the server was moved). */
  get active(): boolean {
    return !this.#off && !this.#closing;
  }

  /**
   * Starts a prime unless one is in flight (it serves this move too); the promise settles when that prime
   * has ended (callers need not wait for it). Never rejects: a prime that cannot be made turns the primer
   * off, and moves then simply wait as they did.
   */
  prime(): Promise<void> {
    if (this.#inFlight) return this.#inFlight;
    if (!this.active) return Promise.resolve();
    // Someone else moved the server (a service manager, an operator): writing the old folder would move
    // it back. The primer stops instead.
    if (readFileSync(SELF_CGROUP, "utf8") !== this.#membership) {
      this.#off = true;
      return Promise.resolve();
    }
    try {
      this.#fd ??= openSync(this.#procsFile, "w");
    } catch {
      this.#off = true;
      return Promise.resolve();
    }
    // One threadpool write on a descriptor kept open: the wait starts now, not a turn of the loop later.
    this.#inFlight = new Promise((resolve) =>
      write(this.#fd!, String(process.pid), (error) => {
        this.#inFlight = undefined;
        if (error) this.#off = true;
        if (this.#closing) this.#release();
        resolve();
      })
    );
    return this.#inFlight;
  }

  /** Stops priming; its descriptor is closed once no write is in flight. */
  close(): void {
    this.#closing = true;
    if (!this.#inFlight) this.#release();
  }

  #release(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
  }
}
