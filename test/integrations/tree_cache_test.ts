import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createTreeCache, type TreeEntry } from "../../server/integrations/mod.ts";

function entries(count: number): TreeEntry[] {
  return Array.from(
    { length: count },
    (_, i) => ({ path: `f${i}`, type: "file", mode: "100644", sha: "b".repeat(40), size: 1 }),
  );
}

describe("createTreeCache", () => {
  it("serves a second request for a key from the cache without loading again", async () => {
    const cache = createTreeCache(100);
    let loads = 0;
    const load = () => (loads++, Promise.resolve(entries(3)));
    const first = await cache.getOrLoad("a", load);
    const second = await cache.getOrLoad("a", load);
    assert.equal(first.hit, false);
    assert.equal(second.hit, true);
    assert.equal(second.entries, first.entries);
    assert.equal(loads, 1);
  });

  it("evicts the least recently used trees to stay within its entry bound, and never keeps a tree larger than the bound", async () => {
    const cache = createTreeCache(10);
    await cache.getOrLoad("a", () => Promise.resolve(entries(4)));
    await cache.getOrLoad("b", () => Promise.resolve(entries(4)));
    await cache.getOrLoad("a", () => Promise.reject(new Error("a is cached")));
    await cache.getOrLoad("c", () => Promise.resolve(entries(4)));
    assert.equal(cache.size, 8);
    assert.equal((await cache.getOrLoad("a", () => Promise.resolve(entries(4)))).hit, true, "a was used recently");
    assert.equal((await cache.getOrLoad("b", () => Promise.resolve(entries(4)))).hit, false, "b was evicted");
    assert.ok(cache.size <= 10);
    assert.equal((await cache.getOrLoad("huge", () => Promise.resolve(entries(11)))).hit, false);
    assert.equal((await cache.getOrLoad("huge", () => Promise.resolve(entries(11)))).hit, false, "too large to keep");
    assert.ok(cache.size <= 10);
  });

  it("shares one load between concurrent requests and forgets a failed load", async () => {
    const cache = createTreeCache(100);
    let loads = 0;
    let release!: (value: TreeEntry[]) => void;
    const load = () => (loads++, new Promise<TreeEntry[]>((resolve) => (release = resolve)));
    const both = Promise.all([cache.getOrLoad("k", load), cache.getOrLoad("k", load)]);
    release(entries(2));
    const [a, b] = await both;
    assert.equal(loads, 1);
    assert.equal(a.entries, b.entries);
    await assert.rejects(cache.getOrLoad("bad", () => Promise.reject(new Error("git failed"))), /git failed/);
    assert.equal((await cache.getOrLoad("bad", () => Promise.resolve(entries(1)))).hit, false);
  });
});
