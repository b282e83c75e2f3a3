import assert from "node:assert/strict";
import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, it } from "node:test";
import { createGroupCommit } from "../../server/store/mod.ts";

describe("group commit", () => {
  it("writes what was added in one turn of the event loop as one batch, and settles each add after it", async () => {
    const batches: number[][] = [];
    const group = createGroupCommit<number>(async (batch) => void batches.push(batch));
    const settled = await Promise.all([group.add(1), group.add(2), group.add(3)]);
    assert.deepEqual(batches, [[1, 2, 3]]);
    assert.deepEqual(settled, [undefined, undefined, undefined]);
    await group.add(4);
    assert.deepEqual(batches, [[1, 2, 3], [4]]);
  });

  it("with delayMs, collects adds of later turns within the window into the same batch", async () => {
    const batches: number[][] = [];
    const group = createGroupCommit<number>(async (batch) => void batches.push(batch), { delayMs: 200 });
    const first = group.add(1);
    await nextTurn();
    await nextTurn();
    const second = group.add(2);
    assert.deepEqual(batches, [], "nothing is written before the window ends");
    await Promise.all([first, second]);
    assert.deepEqual(batches, [[1, 2]]);
  });

  it("rejects every add of a batch whose write failed, and goes on with the next batch", async () => {
    let fail = true;
    const group = createGroupCommit<number>(async () => {
      if (fail) throw new Error("disk full");
    });
    const results = await Promise.allSettled([group.add(1), group.add(2)]);
    assert.deepEqual(results.map((r) => r.status), ["rejected", "rejected"]);
    fail = false;
    await group.add(3);
  });

  it("splits more than batchLimit adds into several batches", async () => {
    const batches: number[][] = [];
    const group = createGroupCommit<number>(async (batch) => void batches.push(batch), { batchLimit: 2 });
    await Promise.all([1, 2, 3, 4, 5].map((n) => group.add(n)));
    assert.deepEqual(batches, [[1, 2], [3, 4], [5]]);
  });

  it("with maxInFlight 1, writes one batch at a time and collects what arrives meanwhile into the next", async () => {
    const batches: number[][] = [];
    let writing = 0;
    let mostAtOnce = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const group = createGroupCommit<number>(async (batch) => {
      writing++;
      mostAtOnce = Math.max(mostAtOnce, writing);
      batches.push(batch);
      if (batch[0] === 1) await gate;
      writing--;
    }, { maxInFlight: 1 });
    const first = group.add(1);
    await nextTurn();
    await nextTurn();
    const later = [2, 3, 4].map((n) => group.add(n));
    await nextTurn();
    await nextTurn();
    assert.deepEqual(batches, [[1]], "the second batch waits for the first to be written");
    release();
    await Promise.all([first, ...later]);
    assert.deepEqual(batches, [[1], [2, 3, 4]]);
    assert.equal(mostAtOnce, 1);
  });
});
