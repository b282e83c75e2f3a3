/**
 * Server-sent-event framing: a message object (`data`, `event`, `id`, `retry`, `comment`, the shape of Deno
 * std's `http/server_sent_event_stream.ts`) written as one event, multi-line data and comments split over
 * several lines, and a `: ping` comment whenever the source stays silent for the heartbeat interval.
 *
 * The bytes are those of the WHATWG event-stream format with a space after each field's colon
 * (`event: error`, `data: {}`, `: ping`), as this server has always sent them.
 */

import type { Writable } from "node:stream";

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

const DATA_FIELD = Buffer.from("data: ");
const EVENT_END = Buffer.from("\n\n");

/**
 * Frames one line of text given as bytes (a stream's item handed through as JSON text) as one event,
 * optionally named, without decoding it: `frameEvent`'s bytes, in one buffer. Text with a line break is
 * decoded (UTF-8) and framed by `frameEvent`, which splits it.
 */
export function frameEventBytes(data: readonly Uint8Array[], options: FrameOptions = {}): Uint8Array | string {
  if (data.some((chunk) => chunk.includes(0x0a) || chunk.includes(0x0d))) {
    return frameEvent(Buffer.concat(data).toString("utf8"), options);
  }
  const head = options.event ? Buffer.from(`event: ${singleLine("event", options.event)}\ndata: `) : DATA_FIELD;
  return Buffer.concat([head, ...data, EVENT_END]);
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
export async function* withHeartbeat<T extends string | Uint8Array>(
  source: AsyncIterable<T>,
  options: HeartbeatOptions,
): AsyncGenerator<T | string> {
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

/** Options of `eventStream`. */
export interface EventStreamOptions<T> {
  /** An item as its event. */
  frame(item: T): string | Uint8Array;
  /** The last event when `source` throws (the status line is gone already). */
  failure(error: unknown): string;
  /** Silence after which a `: ping` is sent. */
  intervalMs: number;
}

/**
 * `source`'s items framed as events, with a `: ping` after each `intervalMs` of silence while the reader
 * waits, written straight to the response once the request's middleware is done (`writeTo`): what
 * `withHeartbeat` over a framing generator does, without a generator and a timer per event (a waiting
 * stream holds one pending `next()` and one timer), and without a readable piped into the response (its
 * state, the pipe's and the end-of-stream listeners kept ~7 KiB of heap alive per open stream: 1,000 open
 * streams). The response closing early (the client left) returns the source's iterator.
 */
export function eventStream<T>(source: AsyncIterable<T>, options: EventStreamOptions<T>): EventWriter {
  return new EventItemsWriter(source[Symbol.asyncIterator](), options);
}

/** An event stream that writes itself to a response (`eventStream`). */
export interface EventWriter {
  /** Writes the events to `out` until the source ends (then ends `out`) or `out` closes. */
  writeTo(out: Writable): void;
  /** The response will not be written (it failed before it started): returns the source's iterator. */
  cancel(): void;
}

/** Whether `body` is an `EventWriter` (the other event-stream bodies are async iterables). */
export function isEventWriter(body: unknown): body is EventWriter {
  return body instanceof EventItemsWriter;
}

/** A response's `error` with no one else to hear it: the `close` that follows ends the stream. */
function ignore(): void {}

class EventItemsWriter<T> implements EventWriter {
  readonly #items: AsyncIterator<T>;
  readonly #options: EventStreamOptions<T>;
  #out: Writable | null = null;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** A `next()` is pending: the reader waits for an item (pings go out only then). */
  #waiting = false;
  /** The last write filled the response's buffer: nothing more until it drains. */
  #blocked = false;
  #ended = false;
  readonly #onDrain = () => {
    this.#blocked = false;
    this.#next();
  };
  readonly #onClose = () => this.#stop();

  constructor(items: AsyncIterator<T>, options: EventStreamOptions<T>) {
    this.#items = items;
    this.#options = options;
  }

  writeTo(out: Writable): void {
    if (this.#ended) return;
    this.#out = out;
    out.on("drain", this.#onDrain);
    out.once("close", this.#onClose);
    out.on("error", ignore);
    this.#timer = setTimeout(() => this.#ping(), this.#options.intervalMs);
    if (out.destroyed) return this.#stop();
    this.#next();
  }

  cancel(): void {
    this.#stop();
  }

  #next(): void {
    if (this.#waiting || this.#ended || this.#blocked) return;
    this.#waiting = true;
    this.#items.next().then((result) => this.#onItem(result), (error: unknown) => this.#onFailure(error));
  }

  #onItem(result: IteratorResult<T>): void {
    this.#waiting = false;
    if (this.#ended) return;
    if (result.done) return this.#end();
    this.#timer?.refresh();
    let event: string | Uint8Array;
    try {
      event = this.#options.frame(result.value);
    } catch (error) {
      this.#onFailure(error);
      return;
    }
    if (this.#write(event)) this.#next();
  }

  #onFailure(error: unknown): void {
    this.#waiting = false;
    if (this.#ended) return;
    this.#write(this.#options.failure(error));
    this.#end();
  }

  /** Writes `chunk`; false when the response must drain first. */
  #write(chunk: string | Uint8Array): boolean {
    const out = this.#out!;
    if (out.destroyed || out.writableEnded) return false;
    const more = out.write(chunk);
    this.#blocked = !more;
    return more;
  }

  #ping(): void {
    if (this.#ended) return;
    // A reader that does not read gets nothing more, pings included.
    if (this.#waiting && !this.#blocked) this.#write(SSE_PING);
    this.#timer?.refresh();
  }

  #end(): void {
    this.#finish();
    const out = this.#out!;
    if (!out.destroyed && !out.writableEnded) out.end();
  }

  /** The response closed (or never started) before the source ended: the source stops. */
  #stop(): void {
    if (this.#ended) return;
    this.#finish();
    void Promise.resolve(this.#items.return?.()).catch(() => undefined);
  }

  #finish(): void {
    this.#ended = true;
    clearTimeout(this.#timer);
    const out = this.#out;
    if (!out) return;
    out.off("drain", this.#onDrain);
    out.off("close", this.#onClose);
  }
}

/** Whether an `Accept` header asks for an event stream. */
export function wantsEventStream(accept: string | undefined): boolean {
  return accept !== undefined && /(^|,)\s*text\/event-stream\s*(;|,|$)/i.test(accept);
}
