import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { randomBytesPooled } from "../../server/random/mod.ts";

describe("randomBytesPooled", () => {
  it("hands out fresh bytes across pool refills, never the same twice", () => {
    const seen = new Set<string>();
    // 4,000 draws of 16 bytes go through the 4 KiB pool about sixteen times.
    for (let i = 0; i < 4_000; i++) {
      const bytes = randomBytesPooled(16);
      assert.equal(bytes.length, 16);
      seen.add(bytes.toString("hex"));
    }
    assert.equal(seen.size, 4_000);
  });

  it("refuses more than 256 bytes at once", () => {
    assert.throws(() => randomBytesPooled(257), RangeError);
  });
});
