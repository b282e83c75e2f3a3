/**
 * `npm run bench`: starts Runplane and its peers as separate processes on loopback, drives them with
 * autocannon, prints one table, and writes it as JSON (scripts/bench/results.json) and as the README's
 * Performance section. `npm run bench -- 1 5` runs only scenarios 1 and 5 (`npm run bench -- drain` is
 * scenario 8 alone), and writes only results.json. PostgreSQL rows use `BENCH_DATABASE_URL` (see
 * _postgres.ts); `BENCH_DRAIN_RUNS` sets the queue drain's size (default 10,000).
 */
import { execFileSync } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ROOT } from "../generate.ts";
import type { BenchContext, Scenario } from "./_context.ts";
import { machineInfo } from "./_machine.ts";
import { startProcess } from "./_processes.ts";
import { type BenchReport, markdownReport, textReport, writeReadmeSection } from "./_report.ts";
import { startRunplane } from "./_runplane.ts";
import { asyncAcceptScenario } from "./scenarios/async_accept.ts";
import { baseImageScenario } from "./scenarios/base_image.ts";
import { idleRssScenario } from "./scenarios/idle_rss.ts";
import { queueDrainScenario } from "./scenarios/queue_drain.ts";
import { repositoryTreeScenario } from "./scenarios/repository_tree.ts";
import { streamingScenario } from "./scenarios/streaming.ts";
import { syncRunScenario } from "./scenarios/sync_run.ts";
import { webhookDeliveryScenario } from "./scenarios/webhook_delivery.ts";

/** Scenarios by number and name, in the order they run (idle memory first, before any load). */
const SCENARIOS: Array<[string, string, Scenario]> = [
  ["7", "idle", idleRssScenario],
  ["1", "sync", syncRunScenario],
  ["2", "accept", asyncAcceptScenario],
  ["3", "streaming", streamingScenario],
  ["4", "webhook", webhookDeliveryScenario],
  ["5", "base-image", baseImageScenario],
  ["6", "tree", repositoryTreeScenario],
  ["8", "drain", queueDrainScenario],
];

const only = process.argv.slice(2);
const unknown = only.filter((wanted) => !SCENARIOS.some(([id, name]) => wanted === id || wanted === name));
if (unknown.length) {
  process.stderr.write(
    `unknown scenario ${unknown.join(", ")}; known: ${SCENARIOS.map(([id, name]) => `${id} (${name})`).join(", ")}\n`,
  );
  process.exit(2);
}
const started = Date.now();
const log = (message: string) =>
  process.stderr.write(`[bench ${((Date.now() - started) / 1000).toFixed(0)}s] ${message}\n`);
log("building the server (npm run build)");
execFileSync(process.execPath, [
  join(ROOT, "node_modules", "tsx", "dist", "cli.mjs"),
  join(ROOT, "scripts", "build.ts"),
], { cwd: ROOT, stdio: "inherit" });
const runplane = await startRunplane({ RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" });
const bareKoa = await startProcess(process.execPath, {
  args: ["--import", "tsx", join(ROOT, "scripts", "bench", "peers", "bare_koa.ts")],
  cwd: ROOT,
});
const context: BenchContext = { runplane, bareKoa, durationSeconds: Number(process.env.BENCH_SECONDS ?? 8), log };
const report: BenchReport = { date: new Date().toISOString().slice(0, 10), machine: machineInfo(), rows: [] };
try {
  for (const [id, name, scenario] of SCENARIOS) {
    if (only.length && !only.includes(id) && !only.includes(name)) continue;
    try {
      report.rows.push(...(await scenario(context)));
    } catch (error) {
      log(`scenario ${id} failed: ${(error as Error).stack}`);
      report.rows.push({
        scenario: `${id}.`,
        subject: "runplane",
        throughput: null,
        unit: "",
        p50Ms: null,
        p99Ms: null,
        peakRssMiB: null,
        ratio: null,
        target: "",
        met: false,
        note: `failed: ${(error as Error).message.split("\n")[0]}`,
      });
    }
  }
} finally {
  await runplane.stop();
  await bareKoa.stop();
}
report.rows.sort((a, b) => a.scenario.localeCompare(b.scenario, "en", { numeric: true }));
process.stdout.write(`${textReport(report)}\n`);
await writeFile(join(ROOT, "scripts", "bench", "results.json"), `${JSON.stringify(report, null, 2)}\n`);
if (only.length === 0) await writeReadmeSection(join(ROOT, "README.md"), markdownReport(report));
log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
