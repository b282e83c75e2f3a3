/** A push-driven async iterable: a producer pushes items, one consumer iterates them as they come. */

/** Options of `ItemQueue`. */
export interface ItemQueueOptions {
  /** Called once when the consumer stops early (break, `return()`, a closed connection). */
  onReturn?: () => void;
  /** Called as the consumer takes each item, with the size it was pushed with (to return credit to the producer). */
  onTake?: (size: number) => void;
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ done: true, value: undefined });

/**
 * A queue of items read with `for await`; `end()` finishes it, `fail()` makes the reader throw. It is
 * its own iterator (one consumer), not an async generator: a stream waiting for its next item holds
 * one promise, not a generator's requests and promises renewed at every item (1,000 open streams).
 */
export class ItemQueue<T> implements AsyncIterableIterator<T> {
  #items: T[] = [];
  #sizes: number[] = [];
  #done = false;
  #error: unknown = undefined;
  /** The reader's pending `next()`, while the queue is empty. */
  #waiter: { resolve(result: IteratorResult<T>): void; reject(error: unknown): void } | undefined;
  #returned = false;
  readonly #onReturn: (() => void) | undefined;
  readonly #onTake: ((size: number) => void) | undefined;

  constructor(options: ItemQueueOptions = {}) {
    this.#onReturn = options.onReturn;
    this.#onTake = options.onTake;
  }

  /** Whether `end()` or `fail()` was called. */
  get finished(): boolean {
    return this.#done;
  }

  /** Adds an item; `size` is handed back to `onTake` when the consumer takes it. */
  push(item: T, size = 0): void {
    if (this.#done) return;
    const waiter = this.#waiter;
    if (waiter) {
      this.#waiter = undefined;
      this.#onTake?.(size);
      waiter.resolve({ done: false, value: item });
      return;
    }
    this.#items.push(item);
    this.#sizes.push(size);
  }

  end(): void {
    this.#done = true;
    this.#settleWaiter();
  }

  fail(error: unknown): void {
    if (this.#done) return;
    this.#error = error;
    this.#done = true;
    this.#settleWaiter();
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.#items.length) {
      const item = this.#items.shift()!;
      this.#onTake?.(this.#sizes.shift()!);
      return Promise.resolve({ done: false, value: item });
    }
    if (this.#returned) return Promise.resolve(DONE);
    if (this.#done) return this.#error === undefined ? Promise.resolve(DONE) : Promise.reject(this.#error);
    return new Promise((resolve, reject) => (this.#waiter = { resolve, reject }));
  }

  /** The consumer stops early (break, a closed connection): `onReturn`, once, unless the queue had finished. */
  return(): Promise<IteratorResult<T>> {
    if (!this.#done && !this.#returned) {
      this.#returned = true;
      this.#onReturn?.();
    }
    this.#returned = true;
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.resolve(DONE);
    return Promise.resolve(DONE);
  }

  #settleWaiter(): void {
    const waiter = this.#waiter;
    if (!waiter) return;
    this.#waiter = undefined;
    if (this.#error === undefined) waiter.resolve(DONE);
    else waiter.reject(this.#error);
  }
}
