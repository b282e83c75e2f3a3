/** A push-driven async iterable: a producer pushes items, one consumer iterates them as they come. */

/** Options of `ItemQueue`. */
export interface ItemQueueOptions {
  /** Called once when the consumer stops early (break, `return()`, a closed connection). */
  onReturn?: () => void;
}

/** A queue of items read with `for await`; `end()` finishes it, `fail()` makes the reader throw. */
export class ItemQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #done = false;
  #error: unknown = undefined;
  #wake: (() => void) | undefined;
  #returned = false;
  readonly #onReturn: (() => void) | undefined;

  constructor(options: ItemQueueOptions = {}) {
    this.#onReturn = options.onReturn;
  }

  /** Whether `end()` or `fail()` was called. */
  get finished(): boolean {
    return this.#done;
  }

  push(item: T): void {
    if (this.#done) return;
    this.#items.push(item);
    this.#wake?.();
  }

  end(): void {
    this.#done = true;
    this.#wake?.();
  }

  fail(error: unknown): void {
    if (this.#done) return;
    this.#error = error;
    this.#done = true;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    try {
      while (true) {
        if (this.#items.length) {
          yield this.#items.shift()!;
          continue;
        }
        if (this.#done) {
          if (this.#error !== undefined) throw this.#error;
          return;
        }
        await new Promise<void>((resolve) => (this.#wake = resolve));
        this.#wake = undefined;
      }
    } finally {
      if (!this.#done && !this.#returned) {
        this.#returned = true;
        this.#onReturn?.();
      }
    }
  }
}
