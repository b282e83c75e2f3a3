/**
 * Slots a worker keeps a moment after their call ended, so that its next call to the same app takes one
 * without asking the supervisor: under a steady load a worker asks for slots only as its load grows, and
 * the supervisor hears nothing per call. A slot left idle for `lingerMs` is given back, so a worker whose
 * load fell holds no slot another process could use for longer than that; a slot on a replica that
 * ended is given back when found.
 */
import type { HeldSlot } from "./call_client.ts";

interface Idle {
  slot: HeldSlot;
  /** `performance.now()` when its call ended. */
  since: number;
}

/** Options of `IdleSlots`. */
export interface IdleSlotsOptions {
  /** How long a slot may stay idle before it is given back. */
  lingerMs: number;
  /** Whether a kept slot's replica may still take calls. */
  usable(slot: HeldSlot): boolean;
}

/** Idle slots by app (`project/app`). */
export class IdleSlots {
  readonly #options: IdleSlotsOptions;
  readonly #byApp = new Map<string, Idle[]>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: IdleSlotsOptions) {
    this.#options = options;
  }

  /** The most recently kept usable slot of `app`, or null; those found unusable are given back. */
  take(app: string): HeldSlot | null {
    const idle = this.#byApp.get(app);
    while (idle?.length) {
      const { slot } = idle.pop()!;
      if (this.#options.usable(slot)) return slot;
      slot.release();
    }
    return null;
  }

  /** Keeps `slot` of `app` for the next call, or gives it back once it stayed idle `lingerMs`. */
  keep(app: string, slot: HeldSlot): void {
    if (!this.#options.usable(slot)) return slot.release();
    let idle = this.#byApp.get(app);
    if (!idle) this.#byApp.set(app, idle = []);
    idle.push({ slot, since: performance.now() });
    this.#timer ??= setTimeout(() => this.#sweep(), this.#options.lingerMs).unref();
  }

  /** Gives every kept slot back. */
  releaseAll(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const idle of this.#byApp.values()) for (const { slot } of idle) slot.release();
    this.#byApp.clear();
  }

  /** Gives back the slots idle for `lingerMs` (the oldest are first: `take` uses the newest). */
  #sweep(): void {
    this.#timer = undefined;
    const due = performance.now() - this.#options.lingerMs;
    for (const [app, idle] of this.#byApp) {
      let stale = 0;
      while (stale < idle.length && idle[stale].since <= due) idle[stale++].slot.release();
      idle.splice(0, stale);
      if (idle.length === 0) this.#byApp.delete(app);
    }
    if (this.#byApp.size) this.#timer = setTimeout(() => this.#sweep(), this.#options.lingerMs).unref();
  }
}
