import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { postgresVersusSqlite } from "../_engines.ts";
import { type LoadOptions, type LoadResult, loadTest } from "../_load.ts";
import { cpuSeconds, memoryOf, startProcess } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

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

/** The figures of several load runs of one subject taken as one: summed throughput, mean p50, worst p99. */
function combined(results: LoadResult[], seconds: number): LoadResult {
  const total = results.reduce((sum, r) => sum + r.total, 0);
  return {
    requestsPerSecond: total / (seconds * results.length),
    p50Ms: results.reduce((sum, r) => sum + r.p50Ms, 0) / results.length,
    p99Ms: Math.max(...results.map((r) => r.p99Ms)),
    total,
    non2xx: results.reduce((sum, r) => sum + r.non2xx, 0),
    errors: results.reduce((sum, r) => sum + r.errors, 0),
  };
}

/**
 * The cost of logging: the same calls to a second server at the default log level (`info`, one line
 * per call) against the bench server (`warn`), in alternating rounds so the host's drift hits both.
 */
async function infoLevelRow(context: BenchContext, scenario: string): Promise<BenchRow> {
  const { runplane, durationSeconds } = context;
  const info: BenchServer = await startRunplane({ RUNPLANE_LOG_LEVEL: "info" });
  try {
    const call = (server: BenchServer, seconds: number) =>
      loadTest(
        `${server.url}/v4/${BENCH_PROJECT}/echo/run`,
        {
          method: "POST",
          headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
          body: BODY,
          durationSeconds: seconds,
        } satisfies LoadOptions,
      );
    context.log("sync run: runplane at log level info, warming up");
    await call(info, 2);
    const half = Math.max(1, Math.round(durationSeconds / 2));
    const atInfo: LoadResult[] = [];
    const atWarn: LoadResult[] = [];
    for (let round = 0; round < 2; round++) {
      context.log(`sync run: log level info vs warn, round ${round + 1} of 2`);
      atInfo.push(await call(info, half));
      atWarn.push(await call(runplane, half));
    }
    const ours = combined(atInfo, half);
    const warn = combined(atWarn, half);
    const lines = info.output().split("\n").filter((line) => line.includes('"msg":"request"')).length;
    return row({
      scenario,
      subject: "runplane at log level info vs warn",
      throughput: ours.requestsPerSecond,
      p50Ms: ours.p50Ms,
      p99Ms: ours.p99Ms,
      peakRssMiB: (await memoryOf(info.child.pid!)).peakRssMiB,
      ratio: ours.requestsPerSecond / warn.requestsPerSecond,
      target: "report (one line per call)",
      note: `warn: ${Math.round(warn.requestsPerSecond)} req/s in the same alternating rounds`
        + (lines ? "" : "; no request lines seen") + (ours.non2xx ? `; ${ours.non2xx} non-2xx` : ""),
    });
  } finally {
    await info.stop();
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
  // The server process's own CPU (not its Python workers'): the front door's cost per call.
  const cpuBefore = await cpuSeconds([runplane.child.pid!]);
  const ours = await loadTest(url, { method: "POST", headers, body: BODY, durationSeconds });
  const oursCpuUs = ((await cpuSeconds([runplane.child.pid!])) - cpuBefore) * 1e6 / ours.total;
  const memory = await memoryOf(runplane.child.pid!);
  const rows: BenchRow[] = [];

  context.log("sync run: bare Koa");
  const koaCpuBefore = await cpuSeconds([bareKoa.child.pid!]);
  const koa = await loadTest(`${bareKoa.url}/run`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: BODY,
    durationSeconds,
  });
  const koaCpuUs = ((await cpuSeconds([bareKoa.child.pid!])) - koaCpuBefore) * 1e6 / koa.total;
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
  rows.push(
    row({
      scenario,
      subject: "runplane: Node CPU per call",
      throughput: oursCpuUs,
      unit: "µs",
      // Issue 50's figure (its other form, ≤ 2.5× bare node:http's per request, is the cores scenario's).
      target: "≤ 60 µs",
      met: oursCpuUs <= 60,
      note:
        `the server process's user + system time over the measured calls (/proc), its Python workers not counted; bare Koa ${
          koaCpuUs.toFixed(1)
        } µs a request in the same run`,
    }),
  );
  rows.push(await infoLevelRow(context, scenario));
  const half = Math.max(1, Math.round(durationSeconds / 2));
  const call = (server: BenchServer, seconds: number) =>
    loadTest(`${server.url}/v4/${BENCH_PROJECT}/echo/run`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: BODY,
      durationSeconds: seconds,
    });
  rows.push(
    await postgresVersusSqlite(context, {
      scenario,
      target: "≥ 0.8× SQLite",
      met: (_, ratio) => ratio >= 0.8,
      warmUp: (server) => call(server, 2),
      measure: async (server) => {
        const result = await call(server, half);
        return { rate: result.requestsPerSecond, p50Ms: result.p50Ms, p99Ms: result.p99Ms, failures: result.non2xx };
      },
    }),
  );
  return rows;
}
