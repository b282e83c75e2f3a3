/**
 * `npm test`: runs every `test/**\/*_test.ts` with node:test through tsx (Node 20's `--test` has no
 * globs). Arguments narrow the run to files whose path contains one of them.
 */
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { ROOT } from "./generate.ts";

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name.startsWith("_") ? [] : testFiles(path);
    return entry.name.endsWith("_test.ts") ? [path] : [];
  }).sort();
}

const filters = process.argv.slice(2);
const files = testFiles(join(ROOT, "test"))
  .map((file) => relative(ROOT, file))
  .filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)));
if (files.length === 0) {
  console.error(`No test files match ${filters.join(", ")}`);
  process.exit(2);
}
const child = spawn(
  process.execPath,
  ["--import", "tsx", "--test", `--test-concurrency=${process.env.RUNPLANE_TEST_CONCURRENCY ?? "2"}`, ...files],
  { cwd: ROOT, stdio: "inherit" },
);
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
