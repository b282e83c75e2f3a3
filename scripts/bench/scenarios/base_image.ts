import { type BenchContext, row } from "../_context.ts";
import { loadTest } from "../_load.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT } from "../_runplane.ts";

const REQUEST = JSON.stringify({
  aptPackages: ["curl", "git", "libpq-dev", "build-essential"],
  pipRequirements: ["numpy==2.1.0", "Pandas>=2", "requests[socks]==2.32.3", "FastAPI==0.115.0"],
  condaPackages: ["python=3.11"],
  shellCommands: [Buffer.from("pip install -e .").toString("base64")],
});

/** 5. The base-image hash: canonicalise, hash, record in the store. */
export async function baseImageScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "5. Base-image hash";
  const { runplane, bareKoa, durationSeconds } = context;
  context.log("base-image: bare Koa sha256");
  const koa = await loadTest(`${bareKoa.url}/hash`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: REQUEST,
    durationSeconds,
  });
  context.log("base-image: runplane");
  const ours = await loadTest(`${runplane.url}/v3/projects/${BENCH_PROJECT}/apps/echo/base-image`, {
    method: "POST",
    headers: { Authorization: `Bearer ${runplane.token}`, "Content-Type": "application/json" },
    body: REQUEST,
    durationSeconds,
  });
  return [
    row({
      scenario,
      subject: "bare Koa sha256 (baseline)",
      throughput: koa.requestsPerSecond,
      p50Ms: koa.p50Ms,
      p99Ms: koa.p99Ms,
    }),
    row({
      scenario,
      subject: "runplane",
      throughput: ours.requestsPerSecond,
      p50Ms: ours.p50Ms,
      p99Ms: ours.p99Ms,
      peakRssMiB: (await memoryOf(runplane.child.pid!)).peakRssMiB,
      ratio: ours.requestsPerSecond / koa.requestsPerSecond,
      target: "report req/s and p99",
      note: ours.non2xx ? `${ours.non2xx} non-2xx` : "",
    }),
  ];
}
