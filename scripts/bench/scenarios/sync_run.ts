import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "../../generate.ts";
import { type BenchContext, row } from "../_context.ts";
import { loadTest } from "../_load.ts";
import { memoryOf, startProcess } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT } from "../_runplane.ts";

const PEER_PYTHON = "/usr/bin/python3";
const BODY = JSON.stringify({ name: "bench" });

function fastApiInstalled(): boolean {
  try {
    execFileSync(PEER_PYTHON, ["-c", "import fastapi, uvicorn"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** 1. A trivial Python function through the whole stack, against uvicorn + FastAPI and bare Koa. */
export async function syncRunScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "1. Sync run";
  const { runplane, bareKoa, durationSeconds } = context;
  const url = `${runplane.url}/v4/${BENCH_PROJECT}/echo/run`;
  const headers = { Authorization: `Bearer ${runplane.token}`, "Content-Type": "application/json" };
  context.log("sync run: warming up");
  await loadTest(url, { method: "POST", headers, body: BODY, durationSeconds: 2 });
  context.log("sync run: runplane");
  const ours = await loadTest(url, { method: "POST", headers, body: BODY, durationSeconds });
  const memory = await memoryOf(runplane.child.pid!);
  const rows: BenchRow[] = [];

  context.log("sync run: bare Koa");
  const koa = await loadTest(`${bareKoa.url}/run`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: BODY,
    durationSeconds,
  });
  rows.push(
    row({
      scenario,
      subject: "bare Koa (baseline)",
      throughput: koa.requestsPerSecond,
      p50Ms: koa.p50Ms,
      p99Ms: koa.p99Ms,
      peakRssMiB: (await memoryOf(bareKoa.child.pid!)).peakRssMiB,
    }),
  );

  if (fastApiInstalled()) {
    context.log("sync run: uvicorn + FastAPI");
    const peer = await startProcess(PEER_PYTHON, {
      args: [join(ROOT, "scripts", "bench", "peers", "fastapi_app.py")],
      readyPath: "/",
    });
    try {
      await loadTest(`${peer.url}/run`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: BODY,
        durationSeconds: 2,
      });
      const fast = await loadTest(`${peer.url}/run`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: BODY,
        durationSeconds,
      });
      rows.push(
        row({
          scenario,
          subject: "uvicorn + FastAPI (baseline)",
          throughput: fast.requestsPerSecond,
          p50Ms: fast.p50Ms,
          p99Ms: fast.p99Ms,
          peakRssMiB: (await memoryOf(peer.child.pid!)).peakRssMiB,
        }),
      );
      const ratio = ours.requestsPerSecond / fast.requestsPerSecond;
      rows.push(
        row({
          scenario,
          subject: "runplane vs FastAPI",
          throughput: ours.requestsPerSecond,
          p50Ms: ours.p50Ms,
          p99Ms: ours.p99Ms,
          peakRssMiB: memory.peakRssMiB,
          ratio,
          target: "≥ 2.0× FastAPI",
          met: ratio >= 2,
          note: ours.non2xx ? `${ours.non2xx} non-2xx` : "",
        }),
      );
    } finally {
      await peer.stop();
    }
  } else {
    rows.push(
      row({
        scenario,
        subject: "uvicorn + FastAPI",
        target: "≥ 2.0× FastAPI",
        note: "peer not installed: apt-get install python3-fastapi python3-uvicorn",
      }),
    );
  }
  const koaRatio = ours.requestsPerSecond / koa.requestsPerSecond;
  rows.push(
    row({
      scenario,
      subject: "runplane vs bare Koa",
      throughput: ours.requestsPerSecond,
      p50Ms: ours.p50Ms,
      p99Ms: ours.p99Ms,
      peakRssMiB: memory.peakRssMiB,
      ratio: koaRatio,
      target: "≥ 0.6× bare Koa",
      met: koaRatio >= 0.6,
    }),
  );
  return rows;
}
