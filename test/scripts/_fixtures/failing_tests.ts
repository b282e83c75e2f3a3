// Run by test_failures_reporter_test.ts, never by `npm test` (not a *_test.ts file): one test fails in a
// nested suite, one passes beside it, one fails at the top.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

describe("outer", () => {
  describe("inner", () => {
    it("fails here", () => assert.equal(1, 2, "one is not two"));
    it("passes", () => {});
  });
});

it("fails at the top", () => {
  throw new Error("first line\nsecond line");
});
