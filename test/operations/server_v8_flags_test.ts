/** The V8 flags `serve` sets at start (server/node_flags.ts): only on a V8 that has them. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { getHeapStatistics } from "node:v8";
import { applyServerV8Flags, serverV8Flags } from "../../server/node_flags.ts";

describe("serverV8Flags", () => {
  it("bounds the young generation's buffers from V8 12.4 (Node 22) on, and sets nothing before", () => {
    assert.deepEqual(serverV8Flags("11.3.244.8-node.38"), []);
    assert.deepEqual(serverV8Flags("12.3.219.16"), []);
    assert.deepEqual(serverV8Flags("12.4.254.21-node.57"), ["--scavenger-max-new-space-capacity-mb=4"]);
    assert.deepEqual(serverV8Flags("13.6.233.17-node.53"), ["--scavenger-max-new-space-capacity-mb=4"]);
  });

  it("applies to this process's V8 without an error", () => {
    applyServerV8Flags();
    assert.ok(getHeapStatistics().total_heap_size > 0);
  });
});
