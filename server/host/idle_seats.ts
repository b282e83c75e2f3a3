/**
 * Seats a worker keeps a moment after their call ended, so that its next call to the same app takes one
 * without asking the supervisor: under a steady load a worker asks for seats only as its load grows, and
 * the supervisor hears nothing per call. A seat left idle for `lingerMs` is given back, so a worker whose
 * load fell holds no slot another process could use for longer than that; a seat on a replica that
 * ended is given back when found.
 */
import type { HeldSeat } from "./call_client.ts";

interface Idle {
  seat: HeldSeat;
  /** `performance.now()` when its call ended. */
  since: number;
}

/** Options of `IdleSeats`. */
export interface IdleSeatsOptions {
  /** How long a seat may stay idle before it is given back. */
  lingerMs: number;
  /** Whether a kept seat's replica may still take calls. */
  usable(seat: HeldSeat): boolean;
}

/** Idle seats by app (`project/app`). */
export class IdleSeats {
  readonly #options: IdleSeatsOptions;
  readonly #byApp = new Map<string, Idle[]>();
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(options: IdleSeatsOptions) {
    this.#options = options;
  }

  /** The most recently kept usable seat of `app`, or null; those found unusable are given back. */
  take(app: string): HeldSeat | null {
    const idle = this.#byApp.get(app);
    while (idle?.length) {
      const { seat } = idle.pop()!;
      if (this.#options.usable(seat)) return seat;
      seat.release();
    }
    return null;
  }

  /** Keeps `seat` of `app` for the next call, or gives it back once it stayed idle `lingerMs`. */
  keep(app: string, seat: HeldSeat): void {
    if (!this.#options.usable(seat)) return seat.release();
    let idle = this.#byApp.get(app);
    if (!idle) this.#byApp.set(app, idle = []);
    idle.push({ seat, since: performance.now() });
    this.#timer ??= setTimeout(() => this.#sweep(), this.#options.lingerMs).unref();
  }

  /** Gives every kept seat back. */
  releaseAll(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const idle of this.#byApp.values()) for (const { seat } of idle) seat.release();
    this.#byApp.clear();
  }

  /** Gives back the seats idle for `lingerMs` (the oldest are first: `take` uses the newest). */
  #sweep(): void {
    this.#timer = undefined;
    const due = performance.now() - this.#options.lingerMs;
    for (const [app, idle] of this.#byApp) {
      let stale = 0;
      while (stale < idle.length && idle[stale].since <= due) idle[stale++].seat.release();
      idle.splice(0, stale);
      if (idle.length === 0) this.#byApp.delete(app);
    }
    if (this.#byApp.size) this.#timer = setTimeout(() => this.#sweep(), this.#options.lingerMs).unref();
  }
}
