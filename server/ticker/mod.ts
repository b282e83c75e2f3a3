/**
 * A background loop for store-polling workers: runs `work` every `intervalMs` and whenever woken, never
 * two at once (a wake during a run makes one more run right after it).
 */

/** Options of `startTicker`. */
export interface TickerOptions {
  intervalMs: number;
  /** Called with whatever `work` threw; the loop goes on. */
  onError(error: unknown): void;
}

/** A running loop. */
export interface Ticker {
  /** Runs the work soon (now, or right after the current run). */
  wake(): void;
  /** Runs the work after `delayMs`. */
  wakeAfter(delayMs: number): void;
  /** Stops the loop and waits for the current run. */
  stop(): Promise<void>;
}

/** Starts the loop; the first run happens at once. Its timers do not keep the process alive. */
export function startTicker(work: () => Promise<void>, options: TickerOptions): Ticker {
  let stopped = false;
  let running: Promise<void> | undefined;
  let again = false;
  const timers = new Set<NodeJS.Timeout>();

  function wake(): void {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = work()
      .catch(options.onError)
      .finally(() => {
        running = undefined;
        if (again) {
          again = false;
          wake();
        }
      });
  }

  function wakeAfter(delayMs: number): void {
    if (stopped) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      wake();
    }, delayMs);
    timer.unref();
    timers.add(timer);
  }

  const interval = setInterval(wake, options.intervalMs);
  interval.unref();
  wake();
  return {
    wake,
    wakeAfter,
    async stop() {
      stopped = true;
      clearInterval(interval);
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await running;
    },
  };
}
