import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type AbortSignalLike, LightAbortController } from "../../server/abort/mod.ts";

describe("LightAbortController", () => {
  it("runs each abort listener once with the reason set, and aborts only once", () => {
    const controller = new LightAbortController();
    const seen: unknown[] = [];
    controller.signal.addEventListener("abort", () => seen.push(controller.signal.reason), { once: true });
    controller.signal.addEventListener("abort", () => seen.push("second"));
    assert.equal(controller.signal.aborted, false);
    const reason = new Error("caller went away");
    controller.abort(reason);
    controller.abort(new Error("again"));
    assert.equal(controller.signal.aborted, true);
    assert.equal(controller.signal.reason, reason);
    assert.deepEqual(seen, [reason, "second"]);
  });

  it("does not run a removed listener, nor one added after the abort", () => {
    const controller = new LightAbortController();
    let calls = 0;
    const listener = () => void calls++;
    controller.signal.addEventListener("abort", listener);
    controller.signal.removeEventListener("abort", listener);
    controller.abort("stop");
    controller.signal.addEventListener("abort", listener);
    assert.equal(calls, 0);
  });

  it("aborts with an AbortError by default, like AbortController", () => {
    const controller = new LightAbortController();
    controller.abort();
    assert.ok(controller.signal.reason instanceof DOMException);
    assert.equal((controller.signal.reason as DOMException).name, "AbortError");
  });

  it("accepts an AbortSignal where an AbortSignalLike is taken", () => {
    const native = new AbortController();
    const like: AbortSignalLike = native.signal;
    let fired = false;
    like.addEventListener("abort", () => void (fired = true), { once: true });
    native.abort();
    assert.equal(fired, true);
  });
});
