/**
 * Server-sent-event framing: a message object (`data`, `event`, `id`, `retry`, `comment`, the shape of Deno
 * std's `http/server_sent_event_stream.ts`) written as one event, multi-line data and comments split over
 * several lines, and a `: ping` comment whenever the source stays silent for the heartbeat interval.
 *
 * The bytes are those of the WHATWG event-stream format with a space after each field's colon
 * (`event: error`, `data: {}`, `: ping`), as this server has always sent them.
 */

const LINE_BREAK = /\r\n|\r|\n/;

/** One server-sent event; every field may be left out. */
export interface ServerSentEventMessage {
  /** The payload; each of its lines becomes a `data:` line. */
  data?: string;
  /** The event type (`message` when left out); a single line. */
  event?: string;
  /** Sets the client's last event ID; a single line. */
  id?: string | number;
  /** The client's reconnection delay, in whole milliseconds. */
  retry?: number;
  /** A comment, ignored by clients (e.g. a keep-alive); each of its lines becomes a `:` line. */
  comment?: string;
}

function singleLine(field: "event" | "id", value: string): string {
  if (LINE_BREAK.test(value)) {
    throw new TypeError(`An SSE ${field === "event" ? "event name" : "id"} cannot contain a line break`);
  }
  return value;
}

/**
 * Writes `message` as one event: its comment lines, `event:`, its `data:` lines, `id:`, `retry:`, then a
 * blank line. Throws a `TypeError` when `event` or `id` contains a line break (which would inject other
 * fields) and a `RangeError` when `retry` is not a whole number of milliseconds.
 *
 * @example
 * ```ts
 * formatServerSentEvent({ event: "error", data: "{}" }); // "event: error\ndata: {}\n\n"
 * formatServerSentEvent({ data: "a\nb", id: 7 }); // "data: a\ndata: b\nid: 7\n\n"
 * formatServerSentEvent({ comment: "ping" }); // ": ping\n\n"
 * ```
 */
export function formatServerSentEvent(message: ServerSentEventMessage): string {
  const lines: string[] = [];
  if (message.comment !== undefined) lines.push(...message.comment.split(LINE_BREAK).map((line) => `: ${line}`));
  if (message.event !== undefined) lines.push(`event: ${singleLine("event", message.event)}`);
  if (message.data !== undefined) lines.push(...message.data.split(LINE_BREAK).map((line) => `data: ${line}`));
  if (message.id !== undefined) lines.push(`id: ${singleLine("id", String(message.id))}`);
  if (message.retry !== undefined) {
    if (!Number.isSafeInteger(message.retry) || message.retry < 0) {
      throw new RangeError("An SSE retry must be a whole number of milliseconds");
    }
    lines.push(`retry: ${message.retry}`);
  }
  return `${lines.join("\n")}\n\n`;
}

/** The `: ping` comment that keeps an idle stream open through proxies. */
export const SSE_PING = formatServerSentEvent({ comment: "ping" });

/** Options of `frameEvent`. */
export interface FrameOptions {
  /** The event name; must not contain a line break. Left out or empty: a plain `message` event. */
  event?: string;
}

/**
 * Frames `data` as one event, optionally named: `formatServerSentEvent({ data, event })`.
 *
 * @example
 * ```ts
 * frameEvent("{}", { event: "error" }); // "event: error\ndata: {}\n\n"
 * ```
 */
export function frameEvent(data: string, options: FrameOptions = {}): string {
  return formatServerSentEvent({ data, event: options.event || undefined });
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

/** Whether an `Accept` header asks for an event stream. */
export function wantsEventStream(accept: string | undefined): boolean {
  return accept !== undefined && /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(accept);
}
