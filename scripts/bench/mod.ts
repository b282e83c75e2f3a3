/**
 * `npm run bench`: starts Runplane and its peers as separate processes on loopback, drives them with
 * autocannon, prints one table, and writes it as JSON (scripts/bench/results.json) and as docs/performance.md's
 * Performance section. `npm run bench -- --scenario sync --scenario accept` (or the numbers, `-- 1 2`)
 * runs only those, and writes only results.json. PostgreSQL rows use `BENCH_DATABASE_URL` (see
 * _postgres.ts); `BENCH_DRAIN_RUNS` sets the queue drain's size (default 10,000).
 *
 * The growth scenarios (how each cost grows with the work: `records`, `streams`, `cold-start`,
 * `receivers`, `backlog`; `--scenario growth` runs all five) take minutes each and run only when named.
 * Their rows go to scripts/bench/growth_results.json (merged by scenario with the previous run's) and to
 * docs/performance.md's "Cost as the work grows" section.
 *
 * The cluster scenario (`cluster`: the forwarding hop between hosts, cold starts avoided; PostgreSQL)
 * runs with the default ones, and its rows go to scripts/bench/cluster_results.json and docs/performance.md's
 * "Across hosts" section whenever it runs, alone or not.
 *
 * The cores scenario (`cores`: throughput against the processes on one host, Runplane beside aiohttp and
 * bare node:http; needs python3-aiohttp) runs only when named; its rows go to
 * scripts/bench/cores_results.json and docs/performance.md's "On every core" section.
 *
 * The images scenario (`images`: apps in `[build] base_image` against the host's system; needs skopeo,
 * umoci, docker-registry, mmdebstrap and root) runs only when named; its rows go to
 * scripts/bench/images_results.json and docs/performance.md's "In images" section.
 *
 * The WebSocket scenario (`websocket`: memory per open connection, round trip added over the replica's
 * relay socket, messages per second through 1 and 100 connections; issue 47) runs only when named; its
 * rows go to scripts/bench/websocket_results.json and docs/performance.md's "WebSockets" section.
 *
 * The batching scenario (`batching`: a batched function against the same unbatched, and the example NumPy
 * model; issue 49) runs only when named; its rows go to scripts/bench/batching_results.json and
 * docs/performance.md's "Batching" section.
 *
 * The CLI scenario (`cli`: `runplane --help` and a real command from the checkout against `node -e 0`,
 * interleaved, wall and CPU time; issue 51) runs only when named, or alone with
 * `npx tsx scripts/bench/scenarios/cli_start.ts`; its rows go to scripts/bench/cli_results.json and
 * docs/performance.md's "CLI start" section.
 *
 * The volumes scenario (`volumes`: upload and download through the files API against `cp`, and the cold
 * start of an app whose preload reads a 500 MiB file from its volume against `cat`; issue 48) runs only
 * when named; its rows go to scripts/bench/volumes_results.json and docs/performance.md's "Volumes" section.
 */
import { execFileSync } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ROOT } from "../_root.ts";
import type { BenchContext, Scenario } from "./_context.ts";
import { machineInfo } from "./_machine.ts";
import { startProcess } from "./_processes.ts";
import {
  type BenchReport,
  type BenchRow,
  batchingMarkdown,
  cliMarkdown,
  clusterMarkdown,
  coresMarkdown,
  growthMarkdown,
  imagesMarkdown,
  volumesMarkdown,
  markdownReport,
  textReport,
  websocketsMarkdown,
  writeReadmeSection,
} from "./_report.ts";
import { startRunplane } from "./_runplane.ts";
import { asyncAcceptScenario } from "./scenarios/async_accept.ts";
import { asyncBacklogScenario } from "./scenarios/async_backlog.ts";
import { baseImageScenario } from "./scenarios/base_image.ts";
import { batchingScenario } from "./scenarios/batching.ts";
import { bundleUploadsScenario } from "./scenarios/bundle_uploads.ts";
import { cgroupCostScenario } from "./scenarios/cgroup_cost.ts";
import { cliStartScenario } from "./scenarios/cli_start.ts";
import { clusterScenario } from "./scenarios/cluster.ts";
import { coldStartScenario } from "./scenarios/cold_start.ts";
import { coresScenario } from "./scenarios/cores.ts";
import { idleRssScenario } from "./scenarios/idle_rss.ts";
import { imagesScenario } from "./scenarios/images.ts";
import { openStreamsScenario } from "./scenarios/open_streams.ts";
import { queueDrainScenario } from "./scenarios/queue_drain.ts";
import { repositoryTreeScenario } from "./scenarios/repository_tree.ts";
import { runRecordsScenario } from "./scenarios/run_records.ts";
import { sandboxCostScenario } from "./scenarios/sandbox_cost.ts";
import { slowReceiversScenario } from "./scenarios/slow_receivers.ts";
import { streamingScenario } from "./scenarios/streaming.ts";
import { syncRunScenario } from "./scenarios/sync_run.ts";
import { webhookDeliveryScenario } from "./scenarios/webhook_delivery.ts";
import { volumesScenario } from "./scenarios/volumes.ts";
import { websocketScenario } from "./scenarios/websockets.ts";

/** Scenarios run only when named, each with a results file and a section of its own. */
const ON_DEMAND: Array<[string, string, Scenario]> = [
  ["18", "cores", coresScenario],
  ["19", "images", imagesScenario],
  ["20", "websocket", websocketScenario],
  ["21", "batching", batchingScenario],
  ["23", "cli", cliStartScenario],
  ["22", "volumes", volumesScenario],
];

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
  ["14", "sandbox", sandboxCostScenario],
  ["15", "bundle_uploads", bundleUploadsScenario],
  ["16", "cgroups", cgroupCostScenario],
  ["17", "cluster", clusterScenario],
];

/** The growth scenarios: run only when named (`growth` names them all). */
const GROWTH: Array<[string, string, Scenario]> = [
  ["9", "streams", openStreamsScenario],
  ["10", "cold-start", coldStartScenario],
  ["11", "records", runRecordsScenario],
  ["12", "receivers", slowReceiversScenario],
  ["13", "backlog", asyncBacklogScenario],
];

/** The scenario names and numbers given as `--scenario x`, `--scenario=x` or bare arguments. */
function requestedScenarios(args: string[]): string[] {
  const wanted: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--scenario") wanted.push(...(args[++i] ?? "").split(","));
    else if (arg.startsWith("--scenario=")) wanted.push(...arg.slice("--scenario=".length).split(","));
    else wanted.push(arg);
  }
  return wanted.filter(Boolean).flatMap((name) => name === "growth" ? GROWTH.map(([, n]) => n) : [name]);
}

const only = requestedScenarios(process.argv.slice(2));
const known = [...SCENARIOS, ...GROWTH, ...ON_DEMAND];
const unknown = only.filter((wanted) => !known.some(([id, name]) => wanted === id || wanted === name));
if (unknown.length) {
  process.stderr.write(
    `unknown scenario ${unknown.join(", ")}; known: ${
      known.map(([id, name]) => `${id} (${name})`).join(", ")
    }, growth\n`,
  );
  process.exit(2);
}
const selected = known.filter(([id, name]) =>
  only.length ? only.includes(id) || only.includes(name) : SCENARIOS.some(([other]) => other === id)
);
const started = Date.now();
const log = (message: string) =>
  process.stderr.write(`[bench ${((Date.now() - started) / 1000).toFixed(0)}s] ${message}\n`);
// `BENCH_SKIP_BUILD=1` runs the dist/ already there: a machine without the build's tools, lent a built kit.
if (process.env.BENCH_SKIP_BUILD !== "1") {
  log("building the server (npm run build)");
  execFileSync(process.execPath, [
    join(ROOT, "node_modules", "tsx", "dist", "cli.mjs"),
    join(ROOT, "scripts", "build.ts"),
  ], { cwd: ROOT, stdio: "inherit" });
}
const runplane = await startRunplane({ RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" });
const bareKoa = await startProcess(process.execPath, {
  args: ["--import", "tsx", join(ROOT, "scripts", "bench", "peers", "bare_koa.ts")],
  cwd: ROOT,
});
const context: BenchContext = { runplane, bareKoa, durationSeconds: Number(process.env.BENCH_SECONDS ?? 8), log };
const report: BenchReport = { date: new Date().toISOString().slice(0, 10), machine: machineInfo(), rows: [] };
try {
  for (const [id, , scenario] of selected) {
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
/** Scenarios whose rows go to a results file and a docs/performance.md section of their own. */
const OWN_SECTIONS = [
  { ids: GROWTH.map(([id]) => id), file: "growth_results.json", section: "growth", markdown: growthMarkdown },
  { ids: ["17"], file: "cluster_results.json", section: "cluster", markdown: clusterMarkdown },
  { ids: ["18"], file: "cores_results.json", section: "cores", markdown: coresMarkdown },
  { ids: ["19"], file: "images_results.json", section: "images", markdown: imagesMarkdown },
  { ids: ["20"], file: "websocket_results.json", section: "websockets", markdown: websocketsMarkdown },
  { ids: ["21"], file: "batching_results.json", section: "batching", markdown: batchingMarkdown },
  { ids: ["23"], file: "cli_results.json", section: "cli", markdown: cliMarkdown },
  { ids: ["22"], file: "volumes_results.json", section: "volumes", markdown: volumesMarkdown },
] as const;
const scenarioId = (row: BenchRow) => row.scenario.split(".")[0];
const ownSection = (row: BenchRow) =>
  OWN_SECTIONS.some((own) => (own.ids as readonly string[]).includes(scenarioId(row)));
const mainReport: BenchReport = { ...report, rows: report.rows.filter((r) => !ownSection(r)) };
// A run of only the growth or cluster scenarios leaves the main results as they were.
if (mainReport.rows.length > 0) {
  await writeFile(join(ROOT, "scripts", "bench", "results.json"), `${JSON.stringify(mainReport, null, 2)}\n`);
}
if (only.length === 0) await writeReadmeSection(join(ROOT, "docs", "performance.md"), markdownReport(mainReport));
for (const own of OWN_SECTIONS) {
  const fresh = report.rows.filter((r) => (own.ids as readonly string[]).includes(scenarioId(r)));
  if (fresh.length === 0) continue;
  // Merged by scenario: a scenario run alone replaces its own rows and keeps the others'.
  const path = join(ROOT, "scripts", "bench", own.file);
  const previous: BenchReport | null = await readFile(path, "utf8").then((t) => JSON.parse(t), () => null);
  const freshScenarios = new Set(fresh.map(scenarioId));
  const merged: BenchReport = {
    ...report,
    rows: [...(previous?.rows ?? []).filter((r) => !freshScenarios.has(scenarioId(r))), ...fresh]
      .sort((a, b) => a.scenario.localeCompare(b.scenario, "en", { numeric: true })),
  };
  await writeFile(path, `${JSON.stringify(merged, null, 2)}\n`);
  await writeReadmeSection(join(ROOT, "docs", "performance.md"), own.markdown(merged), { section: own.section });
}
log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
