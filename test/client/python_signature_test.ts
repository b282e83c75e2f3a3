import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { exampleValue, pythonParameters } from "../../client/python_signature.ts";

describe("pythonParameters", () => {
  it("reads a function's named parameters, their annotations and which have defaults", () => {
    const source = `import json

def helper(x):
    return x

async def run(name: str, count: int = 3, *, tags: list[str] = ("a", "b"), run_id=None, **extra) -> dict:
    return {}
`;
    assert.deepEqual(pythonParameters(source, "run"), [
      { name: "name", annotation: "str", optional: false },
      { name: "count", annotation: "int", optional: true },
      { name: "tags", annotation: "list[str]", optional: true },
    ]);
    assert.deepEqual(pythonParameters(source, "helper"), [{ name: "x", annotation: undefined, optional: false }]);
  });

  it("follows a signature over several lines, with comments, strings and nested brackets", () => {
    const source = `def run(
    text: "str",  # a comment, with a comma
    pairs: dict[str, tuple[int, int]] = {"a": (1, 2)},
    sep: str = ",)\\"",
):
    pass
`;
    assert.deepEqual(pythonParameters(source, "run")?.map((p) => [p.name, p.optional]), [
      ["text", false],
      ["pairs", true],
      ["sep", true],
    ]);
  });

  it("answers null for a missing function, a nested one, *args and positional-only parameters", () => {
    assert.equal(pythonParameters("def other(a):\n    pass\n", "run"), null);
    assert.equal(pythonParameters("class A:\n    def run(self, a):\n        pass\n", "run"), null);
    assert.equal(pythonParameters("def run(*args):\n    pass\n", "run"), null);
    assert.equal(pythonParameters("def run(a, /, b):\n    pass\n", "run"), null);
    assert.equal(pythonParameters("def run(a, b\n", "run"), null);
  });

  it("gives example values by annotation, a string when it says nothing", () => {
    assert.deepEqual(["int", "float", "bool", "list[int]", "dict", "str", undefined].map(exampleValue), [
      1,
      1.5,
      true,
      [],
      {},
      "text",
      "text",
    ]);
  });
});
