/** Work done once per key at a time, and work done one after another: how the store keeps its layout whole. */

/** Calls for one key while one is running share its promise; the key is free again once it settles. */
export class SingleFlight<T> {
  #running = new Map<string, Promise<T>>();

  /** `work()`'s promise, or the one already running for `key`. */
  run(key: string, work: () => Promise<T>): Promise<T> {
    const running = this.#running.get(key);
    if (running) return running;
    const started = work().finally(() => this.#running.delete(key));
    this.#running.set(key, started);
    return started;
  }
}

/** Runs the work given to it one at a time, in order; a failure fails only its own work. */
export class SerialQueue {
  #tail: Promise<unknown> = Promise.resolve();

  /** Runs `work` after everything queued before it has settled. */
  run<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(work, work);
    this.#tail = result.catch(() => undefined);
    return result;
  }
}
