/** A worker's idle slots (server/host/idle_slots.ts): reused newest first, given back once idle a while. */
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, it } from "node:test";
import { IdleSlots } from "../../server/host/idle_slots.ts";
import type { HeldSlot } from "../../server/host/call_client.ts";

function slot(replica: number, released: number[]): HeldSlot {
  return { replica, graceMs: 1000, keep: true, release: () => void released.push(replica) };
}

describe("a worker's idle slots", () => {
  it("hands a kept slot to the next call of the same app, newest first, and none to another app", () => {
    const released: number[] = [];
    const slots = new IdleSlots({ lingerMs: 60_000, usable: () => true });
    slots.keep("p/a", slot(1, released));
    slots.keep("p/a", slot(2, released));
    assert.equal(slots.take("p/b"), null);
    assert.equal(slots.take("p/a")?.replica, 2);
    assert.equal(slots.take("p/a")?.replica, 1);
    assert.equal(slots.take("p/a"), null);
    assert.deepEqual(released, []);
    slots.releaseAll();
  });

  it("gives back a slot whose replica ended instead of keeping or handing it out", () => {
    const released: number[] = [];
    const ended = new Set<number>();
    const slots = new IdleSlots({ lingerMs: 60_000, usable: (s) => !ended.has(s.replica) });
    ended.add(1);
    slots.keep("p/a", slot(1, released));
    assert.deepEqual(released, [1], "not kept");
    slots.keep("p/a", slot(2, released));
    slots.keep("p/a", slot(3, released));
    ended.add(3);
    assert.equal(slots.take("p/a")?.replica, 2, "the ended replica's slot is skipped");
    assert.deepEqual(released, [1, 3]);
    slots.releaseAll();
  });

  it("gives back what stayed idle past the linger, and everything on releaseAll", async () => {
    const released: number[] = [];
    const slots = new IdleSlots({ lingerMs: 30, usable: () => true });
    slots.keep("p/a", slot(1, released));
    // Given back by the sweep after its linger (however late a loaded machine runs the timer).
    for (let waited = 0; released.length === 0 && waited < 10_000; waited += 20) await sleep(20);
    assert.deepEqual(released, [1], "given back after its linger");
    assert.equal(slots.take("p/a"), null);
    slots.keep("p/a", slot(2, released));
    slots.keep("p/b", slot(3, released));
    slots.releaseAll();
    assert.deepEqual(released.sort(), [1, 2, 3]);
  });
});
