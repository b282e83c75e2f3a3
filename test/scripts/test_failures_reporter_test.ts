/**
 * The reporter `npm test` lists failed tests with at the end of its log: each failure, with its suites and
 * its error's first lines, noted as it happens (so that `--test-force-exit` cannot lose it).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";

const ROOT = join(import.meta.dirname, "..", "..");

/** This environment, less what tells a node:test process that it runs as a file of another test run. */
function runnerEnv(): NodeJS.ProcessEnv {
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  return env;
}

it("notes each failed test with its suites and error, and none that passed", async () => {
  const dir = await mkdtemp(join(tmpdir(), "runplane-failures-"));
  try {
    const noted = join(dir, "failures.txt");
    const child = spawn(process.execPath, [
      "--import",
      "tsx",
      "--test",
      "--test-force-exit",
      "--test-reporter=tap",
      "--test-reporter-destination=/dev/null",
      `--test-reporter=${join(ROOT, "scripts", "test_failures_reporter.mjs")}`,
      "--test-reporter-destination=stderr",
      join(ROOT, "test", "scripts", "_fixtures", "failing_tests.ts"),
    ], { cwd: ROOT, stdio: "ignore", env: { ...runnerEnv(), RUNPLANE_TEST_FAILURES: noted } });
    const code = await new Promise((resolve) => child.on("close", resolve));
    assert.equal(code, 1);
    const text = await readFile(noted, "utf8");
    const entries = text.split(/^  ✖ /m).filter(Boolean);
    assert.equal(entries.length, 2, text);
    const [nested, top] = entries;
    assert.match(nested, /^test\/scripts\/_fixtures\/failing_tests\.ts\n    outer > inner > fails here\n/);
    assert.match(nested, /one is not two/);
    assert.match(
      top,
      /^test\/scripts\/_fixtures\/failing_tests\.ts\n    fails at the top\n      first line\n      second line\n/,
    );
    assert.doesNotMatch(text, /passes/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
