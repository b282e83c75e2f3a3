/**
 * Server-sent-event framing: one event per item, multi-line data split over `data:` lines, and a
 * `: ping` comment whenever the source stays silent for the heartbeat interval.
 */

/** The `: ping` comment that keeps an idle stream open through proxies. */
export const SSE_PING = ": ping\n\n";

/** Options of `frameEvent`. */
export interface FrameOptions {
  /** The event name; must not contain a line break. */
  event?: string;
}

/** Frames `data` as one event: every line of it a `data:` line, then a blank line. */
export function frameEvent(data: string, options: FrameOptions = {}): string {
  if (options.event !== undefined && /[\r\n]/.test(options.event)) {
    throw new TypeError("An SSE event name cannot contain a line break");
  }
  const head = options.event ? `event: ${options.event}\n` : "";
  return `${head}${data.split(/\r\n|\r|\n/).map((line) => `data: ${line}`).join("\n")}\n\n`;
}

/** Options of `withHeartbeat`. */
export interface HeartbeatOptions {
  /** Silence after which a `: ping` is sent. */
  intervalMs: number;
}

/**
 * Passes `source`'s chunks through and adds a `: ping` comment after each `intervalMs` of silence.
 * Stopping early (the client left) returns the source iterator.
 */
export async function* withHeartbeat(source: AsyncIterable<string>, options: HeartbeatOptions): AsyncGenerator<string> {
  const iterator = source[Symbol.asyncIterator]();
  let next = iterator.next();
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    while (true) {
      const tick = new Promise<"tick">((resolve) => (timer = setTimeout(() => resolve("tick"), options.intervalMs)));
      const winner = await Promise.race([next, tick]);
      clearTimeout(timer);
      if (winner === "tick") {
        yield SSE_PING;
        continue;
      }
      if (winner.done) return;
      yield winner.value;
      next = iterator.next();
    }
  } finally {
    clearTimeout(timer);
    void Promise.resolve(iterator.return?.()).catch(() => undefined);
  }
}
