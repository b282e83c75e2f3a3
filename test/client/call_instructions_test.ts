import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { callInstructions, exampleBody } from "../../client/call_instructions.ts";

describe("the curl printed after a deploy", () => {
  it("sends the required parameters, names the optional ones, and a placeholder when they are unknown", () => {
    const parameters = [
      { name: "name", annotation: "str", optional: false },
      { name: "times", annotation: "int", optional: false },
      { name: "greeting", annotation: "str", optional: true },
    ];
    assert.deepEqual(exampleBody(parameters), {
      body: '{"name":"text","times":1}',
      comment: "  # optional: greeting",
    });
    assert.deepEqual(exampleBody([]), { body: "{}", comment: "" });
    assert.match(exampleBody(null).comment, /# the function's arguments/);
    assert.equal(
      callInstructions("http://h:1/", { project: "p", app: "a", function: "f" }, parameters),
      [
        "Run URL: http://h:1/v4/p/a/f",
        "  curl -X POST http://h:1/v4/p/a/f \\",
        `    -H "Authorization: Bearer $RUNPLANE_TOKEN" -H 'Content-Type: application/json' -d '{"name":"text","times":1}'  # optional: greeting`,
      ].join("\n"),
    );
  });
});
