/**
 * 21. Dynamic batching (issue 49), on a server of its own (`RUNPLANE_WORKERS=1`) with one replica of
 * `replica_concurrency = 1`, driven by autocannon at 64 concurrent callers:
 * - a function costing a fixed 20 ms per invocation plus 0.1 ms per item, unbatched (one call per
 *   invocation) against batched (`max_size = 32`, `wait_ms = 10`), in alternating rounds: throughput
 *   (target ≥ 8×) and p99 (target ≤ wait_ms + 2 × a full batch's own time, 20 + 32 × 0.1 ms);
 * - the example NumPy model (examples/apps/p-demo/embed): `embed_one` unbatched against `embed` batched,
 *   reported without a target.
 * The mean batch size comes from the server's `runplane_batch_size` histogram.
 */
import { loadavg, tmpdir } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import { copyFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { type LoadResult, loadTest } from "../_load.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const SCENARIO = "21. Batching";
const CALLERS = 64;
const ROUNDS = 2;
const WAIT_MS = 10;
const MAX_SIZE = 32;
/** A full batch's own time: 20 ms fixed plus 0.1 ms per item. */
const FULL_BATCH_MS = 20 + MAX_SIZE * 0.1;

const WORK_MAIN = `import time

def work(x):
    time.sleep(0.020 + 0.0001)
    return x

def work_batched(x):
    time.sleep(0.020 + 0.0001 * len(x))
    return x
`;

const WORK_TOML = `[deployment]
name = "work"

[scaling]
max_replicas = 1
min_replicas = 1
replica_concurrency = 1

[functions.work_batched]
batch = { max_size = ${MAX_SIZE}, wait_ms = ${WAIT_MS} }
`;

/** The apps: `work` (above) and the example's `embed`, in a temporary apps folder. */
async function writeApps(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-bench-batching-"));
  const work = join(dir, BENCH_PROJECT, "work");
  const embed = join(dir, BENCH_PROJECT, "embed");
  await mkdir(work, { recursive: true });
  await mkdir(embed, { recursive: true });
  await writeFile(join(work, "main.py"), WORK_MAIN);
  await writeFile(join(work, "runplane.toml"), WORK_TOML);
  for (const file of ["main.py", "runplane.toml"]) {
    await copyFile(join(ROOT, "examples", "apps", "p-demo", "embed", file), join(embed, file));
  }
  return dir;
}

interface Subject {
  app: string;
  fn: string;
  body: string;
}

function load(server: BenchServer, subject: Subject, seconds: number): Promise<LoadResult> {
  return loadTest(`${server.url}/v4/${BENCH_PROJECT}/${subject.app}/${subject.fn}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: subject.body,
    connections: CALLERS,
    durationSeconds: seconds,
  });
}

/** Calls the last round's callers left behind (an unbatched round leaves a second of them) end first. */
const SETTLE_MS = 2000;

/** Alternating rounds of `a` and `b` after a short warm-up of each: their rounds taken together. */
async function alternate(server: BenchServer, pair: [Subject, Subject], seconds: number) {
  for (const subject of pair) await load(server, subject, 2);
  const results: [LoadResult[], LoadResult[]] = [[], []];
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, subject] of pair.entries()) {
      await sleep(SETTLE_MS);
      results[i].push(await load(server, subject, seconds));
    }
  }
  return results.map((rounds) => ({
    roundsP99: rounds.map((r) => Math.round(r.p99Ms)),
    requestsPerSecond: rounds.reduce((sum, r) => sum + r.total, 0) / (seconds * rounds.length),
    p50Ms: rounds.reduce((sum, r) => sum + r.p50Ms, 0) / rounds.length,
    p99Ms: Math.max(...rounds.map((r) => r.p99Ms)),
    failed: rounds.reduce((sum, r) => sum + r.non2xx + r.errors, 0),
  }));
}

/** The mean size of `fn`'s batches so far, from `/metrics`. */
async function meanBatchSize(server: BenchServer, app: string, fn: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const labels = `{app="${BENCH_PROJECT}/${app}",function="${fn}"}`;
  const value = (name: string) =>
    Number(new RegExp(`^${name}${labels.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1]);
  return value("runplane_batch_size_sum") / value("runplane_batch_size_count");
}

function pairRows(
  figures: Array<{ requestsPerSecond: number; p50Ms: number; p99Ms: number; failed: number; roundsP99: number[] }>,
  names: [string, string],
  extra: { ratioTarget?: number; p99TargetMs?: number; note: string },
): BenchRow[] {
  const [plain, batched] = figures;
  const ratio = batched.requestsPerSecond / plain.requestsPerSecond;
  const rounds = `${ROUNDS} alternating rounds at ${CALLERS} callers; load average ${loadavg()[0].toFixed(1)}`;
  const rows = [
    row({
      scenario: SCENARIO,
      subject: `${names[0]} (baseline)`,
      throughput: plain.requestsPerSecond,
      p50Ms: plain.p50Ms,
      p99Ms: plain.p99Ms,
      note: `${rounds}; ${plain.failed} failed`,
    }),
    row({
      scenario: SCENARIO,
      subject: names[1],
      throughput: batched.requestsPerSecond,
      p50Ms: batched.p50Ms,
      p99Ms: batched.p99Ms,
      ratio,
      target: extra.ratioTarget ? `≥ ${extra.ratioTarget}× throughput` : "",
      met: extra.ratioTarget ? ratio >= extra.ratioTarget : null,
      note: `${ratio.toFixed(1)}× the baseline's throughput; ${extra.note}; ${batched.failed} failed`,
    }),
  ];
  if (extra.p99TargetMs !== undefined) {
    rows.push(row({
      scenario: SCENARIO,
      subject: `${names[1]}: p99 latency`,
      p99Ms: batched.p99Ms,
      target: `p99 ≤ ${extra.p99TargetMs.toFixed(1)} ms`,
      met: batched.p99Ms <= extra.p99TargetMs,
      note: `wait_ms ${WAIT_MS} + 2 × a full batch's own time (${
        FULL_BATCH_MS.toFixed(1)
      } ms); the worst round's; rounds ${batched.roundsP99.join(", ")} ms`,
    }));
  }
  return rows;
}

/** Scenario 21: see the module's comment. */
export async function batchingScenario(context: BenchContext): Promise<BenchRow[]> {
  const appsDir = await writeApps();
  const server = await startRunplane({}, { appsDir });
  try {
    const seconds = context.durationSeconds;
    context.log("batching: 20 ms + 0.1 ms per item, unbatched against batched");
    const work = await alternate(server, [
      { app: "work", fn: "work", body: '{"x":1}' },
      { app: "work", fn: "work_batched", body: '{"x":1}' },
    ], seconds);
    const workSize = await meanBatchSize(server, "work", "work_batched");
    context.log("batching: the example NumPy model, unbatched against batched");
    const features = JSON.stringify({ features: Array.from({ length: 64 }, (_, i) => Math.sin(i)) });
    const model = await alternate(server, [
      { app: "embed", fn: "embed_one", body: features },
      { app: "embed", fn: "embed", body: features },
    ], seconds);
    const modelSize = await meanBatchSize(server, "embed", "embed");
    return [
      ...pairRows(
        work,
        ["20 ms + 0.1 ms/item, unbatched", `same, batched (max_size ${MAX_SIZE}, wait_ms ${WAIT_MS})`],
        {
          ratioTarget: 8,
          p99TargetMs: WAIT_MS + 2 * FULL_BATCH_MS,
          note: `mean batch ${workSize.toFixed(1)} calls`,
        },
      ),
      ...pairRows(model, ["NumPy model (64→16, tanh), unbatched", "NumPy model, batched (max_size 32, wait_ms 10)"], {
        note: `mean batch ${modelSize.toFixed(1)} calls`,
      }),
    ];
  } finally {
    await server.stop();
    await rm(appsDir, { recursive: true, force: true });
  }
}
