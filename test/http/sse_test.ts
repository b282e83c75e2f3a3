import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { Writable } from "node:stream";
import {
  eventStream,
  formatServerSentEvent,
  frameEvent,
  frameEventBytes,
  SSE_PING,
  withHeartbeat,
} from "../../server/http/mod.ts";

/** What a standard event-stream reader makes of `text`: its events, comments and retry values. */
function parse(text: string) {
  const events: EventSourceMessage[] = [];
  const comments: string[] = [];
  const retries: number[] = [];
  const parser = createParser({
    onEvent: (event) => events.push(event),
    onComment: (comment) => comments.push(comment),
    onRetry: (retry) => retries.push(retry),
  });
  parser.feed(text);
  return { events, comments, retries };
}

describe("frameEvent", () => {
  it("frames one line as one data line and a blank line", () => {
    assert.equal(frameEvent("hello"), "data: hello\n\n");
  });

  it("splits every kind of line break into data lines of one event", () => {
    assert.equal(frameEvent("a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
  });

  it("names the event, and refuses a line break in the name", () => {
    assert.equal(frameEvent("{}", { event: "error" }), "event: error\ndata: {}\n\n");
    assert.throws(() => frameEvent("x", { event: "a\nb" }), /cannot contain a line break/);
  });
});

describe("frameEventBytes", () => {
  const bytes = (...texts: string[]) => texts.map((text) => Buffer.from(text));

  it("frames bytes as frameEvent frames their text, named or not, without decoding them", () => {
    for (const event of [undefined, "", "tick"]) {
      const framed = frameEventBytes(bytes('{"a":', '"caf\\u00e9"}'), { event });
      assert.ok(framed instanceof Uint8Array);
      assert.equal(Buffer.from(framed).toString(), frameEvent('{"a":"caf\\u00e9"}', { event }));
    }
    assert.throws(() => frameEventBytes(bytes("{}"), { event: "a\nb" }), TypeError);
  });

  it("splits text with a line break as frameEvent does", () => {
    assert.equal(frameEventBytes(bytes("a\r", "\nb\nc")), frameEvent("a\r\nb\nc"));
  });
});

describe("formatServerSentEvent", () => {
  it("writes the bytes this server has always sent for data, named and ping events", () => {
    assert.equal(formatServerSentEvent({ data: "hello" }), "data: hello\n\n");
    assert.equal(formatServerSentEvent({ event: "error", data: "{}" }), frameEvent("{}", { event: "error" }));
    assert.equal(formatServerSentEvent({ comment: "ping" }), SSE_PING);
    assert.equal(SSE_PING, ": ping\n\n");
  });

  it("writes every field in order, and a standard reader reads them back", () => {
    const text = formatServerSentEvent({ comment: "c1\nc2", event: "item", data: "a\r\nb", id: 42, retry: 1500 });
    assert.equal(text, ": c1\n: c2\nevent: item\ndata: a\ndata: b\nid: 42\nretry: 1500\n\n");
    const read = parse(text);
    assert.deepEqual(read.events, [{ event: "item", data: "a\nb", id: "42" }]);
    assert.deepEqual(read.comments, ["c1", "c2"]);
    assert.deepEqual(read.retries, [1500]);
  });

  it("refuses a line break in the single-line fields, which would inject other fields", () => {
    for (const name of ["a\nb", "a\rb", "a\r\nb"]) {
      assert.throws(() => formatServerSentEvent({ event: name, data: "x" }), {
        name: "TypeError",
        message: "An SSE event name cannot contain a line break",
      });
      assert.throws(() => formatServerSentEvent({ id: name, data: "x" }), {
        name: "TypeError",
        message: "An SSE id cannot contain a line break",
      });
    }
  });

  it("refuses a retry that is not a whole number of milliseconds", () => {
    for (const retry of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.throws(() => formatServerSentEvent({ retry }), RangeError, String(retry));
    }
  });
});

describe("withHeartbeat", () => {
  it("pings during silence and passes chunks through in order", async () => {
    async function* slow() {
      yield "one";
      await sleep(250);
      yield "two";
    }
    const out: string[] = [];
    for await (const chunk of withHeartbeat(slow(), { intervalMs: 60 })) out.push(chunk);
    assert.equal(out[0], "one");
    assert.equal(out.at(-1), "two");
    assert.ok(out.slice(1, -1).length >= 2 && out.slice(1, -1).every((c) => c === SSE_PING), JSON.stringify(out));
  });

  it("passes the source's failure through after its chunks, and pings while it waits", async () => {
    async function* failing() {
      yield "one";
      await sleep(150);
      throw new Error("source failed");
    }
    const out: string[] = [];
    await assert.rejects(async () => {
      for await (const chunk of withHeartbeat(failing(), { intervalMs: 40 })) out.push(chunk);
    }, /source failed/);
    assert.equal(out[0], "one");
    assert.ok(out.slice(1).length >= 1 && out.slice(1).every((c) => c === SSE_PING), JSON.stringify(out));
  });

  it("returns the source when the reader stops early", async () => {
    let closed = false;
    async function* endless() {
      try {
        while (true) yield "x";
      } finally {
        closed = true;
      }
    }
    for await (const _ of withHeartbeat(endless(), { intervalMs: 1000 })) break;
    await sleep(10);
    assert.equal(closed, true);
  });
});

/**
 * A response stand-in: collects what is written; `hold` keeps each write's callback (the client reads
 * nothing) until `release()` (then it reads everything).
 */
function response(options: { hold?: boolean; highWaterMark?: number } = {}) {
  const chunks: string[] = [];
  let holding = options.hold ?? false;
  let held: Array<() => void> = [];
  const out = new Writable({
    highWaterMark: options.highWaterMark ?? 16_384,
    decodeStrings: false,
    write(chunk: string | Buffer, _encoding, callback) {
      chunks.push(String(chunk));
      // Asynchronous, as a socket's: an endless source written to a sink that never fills would
      // otherwise never yield to the timers.
      if (holding) held.push(callback);
      else setImmediate(callback);
    },
  });
  return {
    out,
    text: () => chunks.join(""),
    release() {
      holding = false;
      const waiting = held;
      held = [];
      for (const callback of waiting) callback();
    },
  };
}

/** An endless source that counts the items pulled from it and whether it was returned. */
function countingSource() {
  const source = {
    pulled: 0,
    returned: false,
    [Symbol.asyncIterator]() {
      return {
        next: () => Promise.resolve({ done: false as const, value: source.pulled++ }),
        return: () => {
          source.returned = true;
          return Promise.resolve({ done: true as const, value: undefined });
        },
      };
    },
  };
  return source;
}

const FRAMING = {
  frame: (item: unknown) => frameEvent(JSON.stringify(item)),
  failure: (error: unknown) => frameEvent(String((error as Error).message), { event: "error" }),
};

describe("eventStream", () => {
  it("writes each item as its event, then ends the response", async () => {
    async function* items() {
      yield { n: 1 };
      yield "two";
    }
    const { out, text } = response();
    eventStream(items(), { ...FRAMING, intervalMs: 1000 }).writeTo(out);
    await new Promise((resolve) => out.on("finish", resolve));
    assert.equal(text(), `data: {"n":1}\n\ndata: "two"\n\n`);
  });

  it("writes the source's failure as the last event, after its items", async () => {
    async function* failing() {
      yield 1;
      throw new Error("source failed");
    }
    const { out, text } = response();
    eventStream(failing(), { ...FRAMING, intervalMs: 1000 }).writeTo(out);
    await new Promise((resolve) => out.on("finish", resolve));
    assert.deepEqual(parse(text()).events.map((e) => [e.event, e.data]), [[undefined, "1"], [
      "error",
      "source failed",
    ]]);
  });

  it("stops pulling items while the response is full, and goes on once it drains", async () => {
    const source = countingSource();
    const { out, release } = response({ hold: true, highWaterMark: 64 });
    eventStream(source, { ...FRAMING, intervalMs: 1000 }).writeTo(out);
    await sleep(50);
    const whileFull = source.pulled;
    // Each event is 9 bytes: the 64-byte buffer holds about 8 before the writer waits.
    assert.ok(whileFull > 0 && whileFull <= 10, `pulled ${whileFull} items into a full response`);
    await sleep(50);
    assert.equal(source.pulled, whileFull);
    release();
    await sleep(20);
    assert.ok(source.pulled > whileFull, "no items pulled after the response drained");
    out.destroy();
    await sleep(10);
    assert.equal(source.returned, true);
  });

  it("pings while the source is silent, and not while the response is full", async () => {
    const silent = { [Symbol.asyncIterator]: () => ({ next: () => new Promise<never>(() => {}) }) };
    const quiet = response();
    eventStream(silent, { ...FRAMING, intervalMs: 20 }).writeTo(quiet.out);
    await sleep(150);
    assert.ok(parse(quiet.text()).comments.filter((c) => c === "ping").length >= 2, JSON.stringify(quiet.text()));
    quiet.out.destroy();

    const full = response({ hold: true, highWaterMark: 8 });
    const source = countingSource();
    eventStream(source, { ...FRAMING, intervalMs: 20 }).writeTo(full.out);
    await sleep(150);
    assert.equal(parse(full.text()).comments.length, 0, JSON.stringify(full.text()));
    full.out.destroy();
  });

  it("returns the source when the response closes first, or is never written", async () => {
    const left = countingSource();
    const { out } = response({ hold: true, highWaterMark: 8 });
    eventStream(left, { ...FRAMING, intervalMs: 1000 }).writeTo(out);
    out.destroy();
    await sleep(10);
    assert.equal(left.returned, true);

    const unwritten = countingSource();
    eventStream(unwritten, { ...FRAMING, intervalMs: 1000 }).cancel();
    await sleep(10);
    assert.equal(unwritten.returned, true);
    assert.equal(unwritten.pulled, 0);
  });
});
