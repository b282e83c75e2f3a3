/** A push-driven async iterable: a producer pushes items, one consumer iterates them as they come. */

/** Options of `ItemQueue`. */
export interface ItemQueueOptions {
  /** Called once when the consumer stops early (break, `return()`, a closed connection). */
  onReturn?: () => void;
  /** Called as the consumer takes each item, with the size it was pushed with (to return credit to the producer). */
  onTake?: (size: number) => void;
}

/** A queue of items read with `for await`; `end()` finishes it, `fail()` makes the reader throw. */
export class ItemQueue<T> implements AsyncIterable<T> {
  #items: T[] = [];
  #sizes: number[] = [];
  #done = false;
  #error: unknown = undefined;
  #wake: (() => void) | undefined;
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
    this.#items.push(item);
    this.#sizes.push(size);
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
          const item = this.#items.shift()!;
          this.#onTake?.(this.#sizes.shift()!);
          yield item;
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
