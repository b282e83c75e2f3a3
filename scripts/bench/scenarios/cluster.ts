import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { latencySummary, replicasOn, startBenchCluster, timeCalls } from "../_cluster.ts";
import { type BenchContext, row } from "../_context.ts";
import { postgresUnavailable } from "../_postgres.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer } from "../_runplane.ts";

const SCENARIO = "17. Cluster";
/** Seconds the cold-start app's import sleeps: a stand-in for loading a model or a heavy library. */
const IMPORT_SECONDS = 0.5;
const COLD_CALLS = 30;

const HOP_TOML = `[deployment]\nname = "hop"\nruntime = "python"\n\n[scaling]\nmin_replicas = 0\nmax_replicas = 1\n`
  + `replica_concurrency = 8\ncooldown = 300\n`;
const HOP_MAIN = `def ping():\n    return {"ok": True}\n`;
const SLOW_TOML = `[deployment]\nname = "slow-import"\nruntime = "python"\n\n[scaling]\nmin_replicas = 0\n`
  + `max_replicas = 1\nreplica_concurrency = 1\ncooldown = 300\n`;
const SLOW_MAIN = `import time\n\ntime.sleep(${IMPORT_SECONDS})\n\n\ndef ping():\n    return {"ok": True}\n`;

async function writeApps(appsDir: string): Promise<void> {
  for (const [name, toml, main] of [["hop", HOP_TOML, HOP_MAIN], ["slow-import", SLOW_TOML, SLOW_MAIN]]) {
    const dir = join(appsDir, BENCH_PROJECT, name);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "runplane.toml"), toml);
    await writeFile(join(dir, "main.py"), main);
  }
}

/** One interleaved measurement: the same calls sent to the holder and to the other host, in alternating rounds. */
interface HopRun {
  direct: number[];
  forwarded: number[];
  seconds: { direct: number; forwarded: number };
  /** Each round's forwarded p50 minus its direct p50 (robust to the host's drift between rounds). */
  roundGaps: number[];
}

/**
 * `rounds` rounds of `perRound` calls to each host, `concurrency` at a time; the order flips every round
 * (direct, forwarded, forwarded, direct, …) so the host's drift falls on both alike.
 */
async function interleaved(
  holder: BenchServer,
  other: BenchServer,
  options: { rounds: number; perRound: number; concurrency: number },
): Promise<HopRun> {
  const run: HopRun = { direct: [], forwarded: [], seconds: { direct: 0, forwarded: 0 }, roundGaps: [] };
  const target = { app: "hop", fn: "ping" };
  for (let round = 0; round < options.rounds; round++) {
    const order = round % 2 === 0 ? (["direct", "forwarded"] as const) : (["forwarded", "direct"] as const);
    const p50s = { direct: 0, forwarded: 0 };
    for (const side of order) {
      const started = performance.now();
      const latencies = await timeCalls(side === "direct" ? holder : other, target, {
        count: options.perRound,
        concurrency: options.concurrency,
      });
      run.seconds[side] += (performance.now() - started) / 1000;
      run[side].push(...latencies);
      p50s[side] = latencySummary(latencies).p50Ms;
    }
    run.roundGaps.push(p50s.forwarded - p50s.direct);
  }
  return run;
}

/** The three rows of one interleaved measurement: direct (baseline), forwarded, and what the hop adds. */
function hopRowsOf(run: HopRun, label: string, target: string): BenchRow[] {
  const direct = latencySummary(run.direct);
  const forwarded = latencySummary(run.forwarded);
  const addedP50 = forwarded.p50Ms - direct.p50Ms;
  const addedP99 = forwarded.p99Ms - direct.p99Ms;
  const common = `${run.direct.length} calls each side, ${label}`;
  return [
    row({
      scenario: SCENARIO,
      subject: `sync call on the holder, local replica, ${label} (baseline)`,
      throughput: run.direct.length / run.seconds.direct,
      p50Ms: direct.p50Ms,
      p99Ms: direct.p99Ms,
      note: common,
    }),
    row({
      scenario: SCENARIO,
      subject: `sync call on the other host, forwarded, ${label}`,
      throughput: run.forwarded.length / run.seconds.forwarded,
      p50Ms: forwarded.p50Ms,
      p99Ms: forwarded.p99Ms,
      ratio: (run.forwarded.length / run.seconds.forwarded) / (run.direct.length / run.seconds.direct),
      note: common,
    }),
    row({
      scenario: SCENARIO,
      subject: `forwarding hop, added per call, ${label}`,
      unit: "ms",
      p50Ms: addedP50,
      p99Ms: addedP99,
      target,
      met: target === "report" ? null : addedP50 <= 2,
      note: `forwarded minus direct, percentile by percentile; per round, p50 added ${
        run.roundGaps.map((gap) => gap.toFixed(1)).join(", ")
      } ms (median ${latencySummary(run.roundGaps).p50Ms.toFixed(2)})`,
    }),
  ];
}

/** 1. The forwarding hop: two hosts, one replica; calls on its holder against calls forwarded to it. */
async function hopRows(context: BenchContext, appsDir: string): Promise<BenchRow[]> {
  context.log(`${SCENARIO}: forwarding hop, starting 2 hosts as one cluster`);
  const cluster = await startBenchCluster(2, { appsDir, advertise: true });
  try {
    const [first, second] = cluster.hosts;
    await timeCalls(first, { app: "hop", fn: "ping" }, { count: 20 });
    const perHost = await Promise.all(cluster.hosts.map((host) => replicasOn(host, "hop")));
    if (perHost.reduce((a, b) => a + b, 0) !== 1) throw new Error(`expected one replica, found ${perHost.join(", ")}`);
    const [holder, other] = perHost[0] === 1 ? [first, second] : [second, first];
    // Warm the other host's path too (its view of the seat, its connections to the holder, the JIT).
    await timeCalls(other, { app: "hop", fn: "ping" }, { count: 100 });
    context.log(`${SCENARIO}: forwarding hop, 10 rounds x 100 sequential calls each side`);
    const sequential = await interleaved(holder, other, { rounds: 10, perRound: 100, concurrency: 1 });
    context.log(`${SCENARIO}: forwarding hop, 4 rounds x 200 calls each side at concurrency 8`);
    const concurrent = await interleaved(holder, other, { rounds: 4, perRound: 200, concurrency: 8 });
    const after = await Promise.all(cluster.hosts.map((host) => replicasOn(host, "hop")));
    const rows = [
      ...hopRowsOf(sequential, "sequential", "p50 added ≤ 2 ms"),
      ...hopRowsOf(concurrent, "concurrency 8", "report"),
    ];
    if (after[cluster.hosts.indexOf(other)] !== 0 || after.reduce((a, b) => a + b, 0) !== 1) {
      for (const r of rows) r.note += `; replicas per host after: ${after.join(", ")} (expected one, on the holder)`;
    }
    return rows;
  } finally {
    await cluster.stop();
  }
}

/** Three hosts, `COLD_CALLS` sequential calls round-robin over them: replicas started and latencies. */
async function coldCalls(
  appsDir: string,
  advertise: boolean,
): Promise<{ replicas: number[]; latencies: number[] }> {
  const cluster = await startBenchCluster(3, { appsDir, advertise });
  try {
    const latencies: number[] = [];
    for (let i = 0; i < COLD_CALLS; i++) {
      latencies.push(...await timeCalls(cluster.hosts[i % 3], { app: "slow-import", fn: "ping" }, { count: 1 }));
    }
    const replicas = await Promise.all(cluster.hosts.map((host) => replicasOn(host, "slow-import")));
    return { replicas, latencies };
  } finally {
    await cluster.stop();
  }
}

/** What one mode's rounds of `coldCalls` measured together. */
interface ColdRuns {
  /** Replicas started in each round (summed over the three processes), and per process. */
  started: number[];
  perProcess: string[];
  latencies: number[];
  /** Each round's calls' summed time, in seconds. */
  summedSeconds: number[];
}

function coldRow(measured: ColdRuns, subject: string, goal: { target: string; met: boolean | null }): BenchRow {
  const summary = latencySummary(measured.latencies);
  const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
  const started = mean(measured.started);
  return row({
    scenario: SCENARIO,
    subject,
    throughput: started,
    unit: started === 1 ? "replica started" : "replicas started",
    p50Ms: summary.p50Ms,
    p99Ms: summary.p99Ms,
    ...goal,
    note: `${COLD_CALLS} sequential calls round-robin over 3 processes (import sleeps ${IMPORT_SECONDS} s), `
      + `${measured.started.length} rounds on fresh processes; replicas per process ${
        measured.perProcess.join(" / ")
      }; `
      + `max ${Math.round(summary.maxMs)} ms; calls summed ${
        measured.summedSeconds.map((s) => s.toFixed(2)).join(" / ")
      } s`,
  });
}

/**
 * 2. Cold starts avoided: the same calls on three processes as one cluster and as three that each count
 * their own, in rounds ordered apart, cluster, cluster, apart (so the host's drift falls on both alike).
 */
async function coldStartRows(context: BenchContext, appsDir: string): Promise<BenchRow[]> {
  const runs = { apart: [] as ColdRuns[], joined: [] as ColdRuns[] };
  for (const mode of ["apart", "joined", "joined", "apart"] as const) {
    context.log(`${SCENARIO}: cold starts, 3 processes ${mode === "joined" ? "as one cluster" : "each on its own"}`);
    const { replicas, latencies } = await coldCalls(appsDir, mode === "joined");
    runs[mode].push({
      started: [replicas.reduce((a, b) => a + b, 0)],
      perProcess: [replicas.join(", ")],
      latencies,
      summedSeconds: [latencies.reduce((a, b) => a + b, 0) / 1000],
    });
  }
  const merged = (list: ColdRuns[]): ColdRuns => ({
    started: list.flatMap((r) => r.started),
    perProcess: list.flatMap((r) => r.perProcess),
    latencies: list.flatMap((r) => r.latencies),
    summedSeconds: list.flatMap((r) => r.summedSeconds),
  });
  const apart = merged(runs.apart);
  const joined = merged(runs.joined);
  return [
    coldRow(apart, "3 processes, each counts its own (baseline)", { target: "", met: null }),
    coldRow(joined, "3 processes as one cluster", {
      target: "1 replica for max_replicas = 1",
      met: joined.started.every((n) => n === 1),
    }),
  ];
}

/**
 * 17. Cluster (issue 31): what the forwarding hop adds to a sync call between two hosts, and the cold
 * starts that counting replicas cluster-wide avoids on three. Needs PostgreSQL; without one the rows say so.
 */
export async function clusterScenario(context: BenchContext): Promise<BenchRow[]> {
  const unavailable = await postgresUnavailable();
  if (unavailable) {
    context.log(`${SCENARIO}: ${unavailable}`);
    return [row({ scenario: SCENARIO, subject: "forwarding hop and cold starts avoided", note: unavailable })];
  }
  const appsDir = await mkdtemp(join(tmpdir(), "runplane-bench-cluster-"));
  try {
    await writeApps(appsDir);
    return [...(await hopRows(context, appsDir)), ...(await coldStartRows(context, appsDir))];
  } finally {
    await rm(appsDir, { recursive: true, force: true });
  }
}
