import assert from "node:assert/strict";
import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, it } from "node:test";
import { createBatchedLookup } from "../../server/store/mod.ts";

describe("batched lookup", () => {
  it("reads the keys asked for in one turn with one read, each key once, and answers every caller", async () => {
    const reads: string[][] = [];
    const lookup = createBatchedLookup(async (keys: string[]) => {
      reads.push(keys);
      return new Map(keys.filter((k) => k !== "missing").map((k) => [k, k.toUpperCase()]));
    });
    const answers = await Promise.all(["a", "b", "a", "missing"].map((k) => lookup.get(k)));
    assert.deepEqual(answers, ["A", "B", "A", undefined]);
    assert.deepEqual(reads, [["a", "b", "missing"]]);
  });

  it("answers a key asked for during a read from the next read, never from the one already on its way", async () => {
    let stored = "live";
    const reads: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const lookup = createBatchedLookup(async (keys: string[]) => {
      const seen = stored; // what the store held when the read started
      reads.push(seen);
      if (reads.length === 1) await gate;
      return new Map(keys.map((k) => [k, seen]));
    });
    const first = lookup.get("token");
    await nextTurn();
    await nextTurn();
    assert.deepEqual(reads, ["live"], "the first read started");
    stored = "revoked";
    const second = lookup.get("token");
    release();
    assert.equal(await first, "live");
    assert.equal(await second, "revoked", "asked after the change, answered by a read made after it");
    assert.deepEqual(reads, ["live", "revoked"]);
  });

  it("rejects the callers of a failed read and goes on with the next one", async () => {
    let fail = true;
    const lookup = createBatchedLookup(async (keys: number[]) => {
      if (fail) throw new Error("connection lost");
      return new Map(keys.map((k) => [k, k * 2]));
    });
    const results = await Promise.allSettled([lookup.get(1), lookup.get(2)]);
    assert.deepEqual(results.map((r) => r.status), ["rejected", "rejected"]);
    fail = false;
    assert.equal(await lookup.get(3), 6);
  });

  it("splits more than batchLimit distinct keys over several reads", async () => {
    const reads: number[][] = [];
    const lookup = createBatchedLookup(async (keys: number[]) => {
      reads.push(keys);
      return new Map(keys.map((k) => [k, k]));
    }, { batchLimit: 2 });
    assert.deepEqual(await Promise.all([1, 2, 3, 4, 5].map((k) => lookup.get(k))), [1, 2, 3, 4, 5]);
    assert.deepEqual(reads, [[1, 2], [3, 4], [5]]);
  });
});
