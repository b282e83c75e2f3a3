import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import { formatServerSentEvent, frameEvent, SSE_PING, withHeartbeat } from "../../server/http/mod.ts";

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
