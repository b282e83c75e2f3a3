/**
 * Counts requests in flight and, once draining, turns new calls away with a 503 problem, so a stopping
 * server finishes what it started and takes nothing new.
 */

/** Paths that keep answering while draining: probes and scrapes must see the drain. */
const ALWAYS_OPEN = new Set(["/healthz", "/readyz", "/metrics", "/.well-known/jwks.json"]);

/** The drain state shared by the HTTP layer and the server's stop sequence. */
export interface DrainGate {
  readonly draining: boolean;
  /** Requests whose response has not finished (streams included). */
  readonly active: number;
  /** Starts draining: from now on new calls get 503. */
  close(): void;
  /** Whether a request for `path` is turned away. */
  refuses(path: string): boolean;
  /** Counts a request in; call `leave` (unbound is fine) once its response is over. */
  enter(): void;
  /** Counts a request out. */
  leave(): void;
  /** Resolves with 0 once no request is in flight, or with how many still are after `timeoutMs`. */
  idle(timeoutMs: number): Promise<number>;
}

/** Creates an open gate. */
export function createDrainGate(): DrainGate {
  let draining = false;
  let active = 0;
  let wake = () => {};
  return {
    get draining() {
      return draining;
    },
    get active() {
      return active;
    },
    close() {
      draining = true;
    },
    refuses(path) {
      return draining && !ALWAYS_OPEN.has(path);
    },
    enter() {
      active++;
    },
    leave() {
      active--;
      if (active === 0) wake();
    },
    async idle(timeoutMs) {
      if (active === 0) return 0;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      return active;
    },
  };
}
