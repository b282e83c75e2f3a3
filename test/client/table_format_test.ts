import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatTable } from "../../client/table_format.ts";

describe("formatTable", () => {
  it("aligns columns under a header, two spaces apart, the last column unpadded", () => {
    assert.equal(
      formatTable(["APP", "STATE", "ERROR"], [["hello", "ready", null], ["a", "failed", "pip failed"]]),
      ["APP    STATE   ERROR", "hello  ready   -", "a      failed  pip failed"].join("\n"),
    );
  });

  it("keeps each cell on one line and without terminal controls", () => {
    assert.equal(formatTable(["A", "B"], [["x\x1b[2Jy", "one\n  two"]]), "A   B\nxy  one two");
  });
});
