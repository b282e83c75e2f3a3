import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import {
  type LongFunctionList,
  MAX_FUNCTION_LINES,
  measureFunctions,
  measureSource,
  ratchetReport,
  shrunkList,
} from "../../scripts/check_function_length.ts";

async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "runplane-function-length-"));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(root, dirname(path)), { recursive: true });
    await writeFile(join(root, path), text);
  }
  return root;
}

/** A function declaration `name` spanning exactly `lines` lines. */
function functionOf(name: string, lines: number): string {
  const body = Array.from({ length: lines - 2 }, (_, i) => `  const v${i} = ${i};`).join("\n");
  return `export function ${name}(): void {\n${body}\n}\n`;
}

function list(functions: Record<string, number>): LongFunctionList {
  return { functions };
}

describe("the function-length ratchet", () => {
  it("counts a function's lines from its signature to its closing line, without its doc comment", () => {
    const [measured] = measureSource("server/a.ts", `/**\n * Doc.\n */\n${functionOf("f", 5)}`);
    assert.deepEqual(measured, { key: "server/a.ts#f", file: "server/a.ts", name: "f", line: 4, lines: 5 });
  });

  it("names methods, accessors, arrows, function expressions and callbacks by what encloses them", () => {
    const names = measureSource(
      "server/a.ts",
      [
        "export function createThing() {",
        "  const helper = () => 1;",
        "  return {",
        "    run() { return helper(); },",
        "    stop: function () {},",
        "  };",
        "}",
        "class Queue {",
        "  constructor() {}",
        "  get size() { return 0; }",
        "  claim() { [1].map((x) => x); [2].map((x) => x); }",
        "}",
        "const make = function named() {};",
        "export default () => 0;",
      ].join("\n"),
    ).map((f) => f.name);
    assert.deepEqual(names, [
      "createThing",
      "createThing.helper",
      "createThing.run",
      "createThing.stop",
      "Queue.constructor",
      "Queue.get size",
      "Queue.claim",
      "Queue.claim.[1].map(…)",
      "Queue.claim.[2].map(…)",
      "named",
      "<default>",
    ]);
  });

  it("tells two anonymous functions of one name apart by their order", () => {
    const source = "function f() {\n  on(() => 1);\n  on(() => 2);\n}\n";
    const names = measureSource("server/a.ts", source).map((f) => f.name);
    assert.deepEqual(names, ["f", "f.on(…)", "f.on(…)#2"]);
  });

  it(`fails on a function of ${MAX_FUNCTION_LINES + 1} lines that is not listed, naming the list`, async () => {
    const root = await tree({ "server/long.ts": functionOf("tooLong", MAX_FUNCTION_LINES + 1) });
    try {
      const report = ratchetReport(measureFunctions(root), list({}));
      assert.equal(report.length, 1, report.join("\n"));
      assert.match(
        report[0],
        /^server\/long\.ts:1: tooLong is 121 lines, over 120 and not in scripts\/long_functions\.json/,
      );
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it(`passes on a listed function of ${MAX_FUNCTION_LINES + 1} lines and on an unlisted one of ${MAX_FUNCTION_LINES}`, async () => {
    const root = await tree({
      "server/long.ts": functionOf("tooLong", MAX_FUNCTION_LINES + 1),
      "client/short.ts": functionOf("justRight", MAX_FUNCTION_LINES),
    });
    try {
      assert.deepEqual(ratchetReport(measureFunctions(root), list({ "server/long.ts#tooLong": 121 })), []);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("measures server/ and client/ (the dashboard's JavaScript too), not test/ or scripts/", async () => {
    const long = functionOf("tooLong", MAX_FUNCTION_LINES + 1);
    const root = await tree({
      "server/a.ts": long,
      "client/dashboard/b.js": long,
      "test/c_test.ts": long,
      "scripts/d.ts": long,
    });
    try {
      const offenders = ratchetReport(measureFunctions(root), list({})).map((line) => line.split(":")[0]);
      assert.deepEqual(offenders, ["client/dashboard/b.js", "server/a.ts"]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("fails on a listed function that is now short enough, or gone: remove it from the list", async () => {
    const root = await tree({ "server/a.ts": functionOf("shrunk", MAX_FUNCTION_LINES) });
    try {
      const report = ratchetReport(
        measureFunctions(root),
        list({ "server/a.ts#shrunk": 200, "server/gone.ts#removed": 300 }),
      );
      assert.equal(report.length, 2, report.join("\n"));
      assert.match(report[0], /^server\/a\.ts:1: shrunk is 120 lines now, at most 120: remove it from/);
      assert.match(report[1], /^server\/gone\.ts#removed is listed in .* but is gone: remove it from the list/);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("updates the list only by removing entries: a new long function is never added", async () => {
    const root = await tree({
      "server/a.ts": functionOf("stillLong", 130) + functionOf("shrunk", 20) + functionOf("newlyLong", 125),
    });
    try {
      const measured = measureFunctions(root);
      const before = list({ "server/a.ts#stillLong": 140, "server/a.ts#shrunk": 150, "server/b.ts#gone": 200 });
      const after = shrunkList(measured, before);
      assert.deepEqual(after.functions, { "server/a.ts#stillLong": 140 });
      const report = ratchetReport(measured, after);
      assert.equal(report.length, 1, report.join("\n"));
      assert.match(report[0], /newlyLong is 125 lines, over 120 and not in/);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
