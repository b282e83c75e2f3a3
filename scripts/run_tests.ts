/**
 * `npm test`: runs every `test/**\/*_test.ts` with node:test through tsx. Arguments narrow the run to files
 * whose path contains one of them; `--store-durations` rewrites `test/_durations.json` from this run.
 *
 * The files run in shards: a few processes, each importing its share of the files one after another, so
 * the server's modules are loaded (through tsx's loader) once per shard instead of once per file. That
 * loading cost ~1.5 s of CPU per file, a third of the whole suite's CPU on a 2-core machine. Files are dealt
 * to shards longest first by their durations in `test/_durations.json` (as pytest-split does; a file not
 * listed counts as the median), and every shard runs at once: most of a shard's time is spent waiting on
 * processes, sockets and timers, not on the CPU. `RUNPLANE_TEST_CONCURRENCY` sets the number of shards.
 * Within a shard, files run one after another and their tests in order, as they would alone.
 *
 * The tests that start the server as a process start it from one bundled file built here
 * (`scripts/server_bundle.ts`, `RUNPLANE_TEST_SERVER_BUNDLE`); a test file run on its own starts it
 * through tsx.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT } from "./generate.ts";
import { bundleServer } from "./server_bundle.ts";

const DURATIONS = join(ROOT, "test", "_durations.json");
const DEFAULT_SHARDS = 6;

function testFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name.startsWith("_") ? [] : testFiles(path);
    return entry.name.endsWith("_test.ts") ? [path] : [];
  }).sort();
}

function readDurations(): Record<string, number> {
  try {
    return JSON.parse(readFileSync(DURATIONS, "utf8")) as Record<string, number>;
  } catch {
    return {};
  }
}

/** Deals `files` to `count` shards, longest first, each to the shard with the least time so far. */
function dealShards(files: string[], count: number, durations: Record<string, number>): string[][] {
  const known = Object.values(durations).sort((a, b) => a - b);
  const median = known.length > 0 ? known[Math.floor(known.length / 2)] : 1;
  const weight = (file: string) => durations[file] ?? median;
  const shards = Array.from({ length: count }, () => ({ files: [] as string[], seconds: 0 }));
  for (const file of [...files].sort((a, b) => weight(b) - weight(a) || a.localeCompare(b))) {
    const lightest = shards.reduce((best, shard) => shard.seconds < best.seconds ? shard : best);
    lightest.files.push(file);
    lightest.seconds += weight(file);
  }
  return shards.filter((shard) => shard.files.length > 0).map((shard) => shard.files);
}

/**
 * A shard's entry module: imports each file in turn. A file that fails to import becomes one failing test
 * named after it, and the shard goes on with the next.
 */
function shardModule(files: string[]): string {
  const lines = [
    `import { after, test } from "node:test";`,
    // A shard's process must end once its files' tests have, even if a file left a timer or socket behind
    // (on Node 24 one such leftover held a finished shard until the backstop). --test-force-exit did that,
    // but exits before the last verdicts reach the parent (nodejs/node#64833: a Node 24 CI pass reported
    // 3 tests fewer than ran, with fail 0). Instead: once every test of the shard ended, the process may
    // end by itself, and is made to 5 s later (the verdicts long written); its exit code is the runner's.
    `after(() => { setTimeout(() => process.exit(), 5000).unref(); });`,
  ];
  for (const file of files) {
    const url = JSON.stringify(pathToFileURL(join(ROOT, file)).href);
    lines.push(
      `await import(${url}).catch((error) => test(${JSON.stringify(`${file} (import)`)}, () => { throw error; }));`,
    );
  }
  return lines.join("\n") + "\n";
}

const args = process.argv.slice(2);
const storeDurations = args.includes("--store-durations");
const filters = args.filter((arg) => arg !== "--store-durations");
const allFiles = testFiles(join(ROOT, "test")).map((file) => relative(ROOT, file));
const files = allFiles
  .filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)));
if (files.length === 0) {
  console.error(`No test files match ${filters.join(", ")}`);
  process.exit(2);
}

const shardCount = Number(process.env.RUNPLANE_TEST_CONCURRENCY ?? DEFAULT_SHARDS);
if (!Number.isInteger(shardCount) || shardCount < 1) {
  console.error(`RUNPLANE_TEST_CONCURRENCY must be a whole number of shards of at least 1, not ${shardCount}`);
  process.exit(2);
}
const shards = dealShards(files, shardCount, readDurations());
const work = mkdtempSync(join(tmpdir(), "runplane-test-shards-"));
const shardFiles = shards.map((shard, i) => {
  const path = join(work, `shard_${i + 1}_of_${shards.length}.mjs`);
  writeFileSync(path, shardModule(shard));
  return path;
});
const measured = join(work, "durations.json");
// Inside the checkout, so that the bundle's imports of packages resolve to its node_modules.
mkdirSync(join(ROOT, "node_modules", ".cache"), { recursive: true });
const bundleDir = mkdtempSync(join(ROOT, "node_modules", ".cache", "runplane-test-server-"));
const bundle = join(bundleDir, "main.mjs");
function removeScratch(): void {
  rmSync(work, { recursive: true, force: true });
  rmSync(bundleDir, { recursive: true, force: true });
}
try {
  await bundleServer(bundle);
} catch (error) {
  removeScratch();
  throw error;
}
// node:test's own reporter as it would pick it; the failed tests, noted in a file and listed at the very
// end of the log (a CI page may keep only the log's tail); the durations when asked for.
const failures = join(work, "failures.txt");
const reporter = (name: string) => `--test-reporter=${pathToFileURL(join(ROOT, "scripts", name)).href}`;
const reporters = [
  `--test-reporter=${process.stdout.isTTY ? "spec" : "tap"}`,
  "--test-reporter-destination=stdout",
  reporter("test_failures_reporter.mjs"),
  "--test-reporter-destination=stderr",
  ...(storeDurations ? [reporter("test_durations_reporter.mjs"), "--test-reporter-destination=stderr"] : []),
];
const child = spawn(
  process.execPath,
  [
    "--import",
    "tsx",
    "--test",
    `--test-concurrency=${shards.length}`,
    // A backstop: a test that hangs fails after 30 minutes instead of holding its shard (and CI) forever.
    // Not a bound on a shard's time: on a loaded 2-core machine a whole shard ran 19.4 minutes (2026-11-29).
    // It bounds each shard's module too (node:test counts a file as a test): 10 minutes was too few for
    // a shard of a loaded machine once the chaos and full-disk suites joined.
    "--test-timeout=1800000",
    ...reporters,
    ...shardFiles,
  ],
  {
    cwd: ROOT,
    stdio: "inherit",
    env: {
      ...process.env,
      RUNPLANE_TEST_SERVER_BUNDLE: bundle,
      RUNPLANE_TEST_FAILURES: failures,
      RUNPLANE_TEST_DURATIONS: measured,
    },
  },
);
for (const signal of ["SIGINT", "SIGTERM"] as const) process.on(signal, () => child.kill(signal));
/** Prints the failed tests the reporter noted, if any, as the log's last lines. */
function listFailures(): void {
  let text: string;
  try {
    text = readFileSync(failures, "utf8");
  } catch {
    return;
  }
  const count = text.split("\n").filter((line) => line.startsWith("  ✖ ")).length;
  process.stdout.write(`\n==== ${count} failed test${count === 1 ? "" : "s"}\n${text}`);
}

child.on("exit", (code, signal) => {
  listFailures();
  if (storeDurations && code === 0) {
    const seconds = JSON.parse(readFileSync(measured, "utf8")) as Record<string, number>;
    const merged: Record<string, number> = { ...readDurations(), ...seconds };
    // Files that no longer exist drop out; the ones this run did not reach keep their earlier figure.
    const rounded = Object.fromEntries(
      allFiles.filter((file) => merged[file] !== undefined).map((file) => [file, Math.round(merged[file] * 10) / 10]),
    );
    writeFileSync(DURATIONS, JSON.stringify(rounded, null, 2) + "\n");
    console.error(`Wrote the durations of ${Object.keys(seconds).length} files to ${relative(ROOT, DURATIONS)}`);
  }
  removeScratch();
  process.exit(code ?? (signal ? 1 : 0));
});
