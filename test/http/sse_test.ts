import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { frameEvent, SSE_PING, withHeartbeat } from "../../server/http/mod.ts";

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
