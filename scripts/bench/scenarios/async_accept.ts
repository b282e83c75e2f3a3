import { type BenchContext, row } from "../_context.ts";
import { postgresVersusSqlite } from "../_engines.ts";
import { loadTest } from "../_load.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer } from "../_runplane.ts";

/** 2. `async=true` calls answered 202 with their durable record. */
export async function asyncAcceptScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "2. Async accept";
  const { runplane, bareKoa, durationSeconds } = context;
  const body = JSON.stringify({ name: "bench" });
  context.log("async accept: bare Koa");
  const koa = await loadTest(`${bareKoa.url}/accept`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body,
    durationSeconds,
  });
  const url = `${runplane.url}/v4/${BENCH_PROJECT}/queue/run?async=true`;
  const headers = { Authorization: `Bearer ${runplane.token}`, "Content-Type": "application/json" };
  // Like the sync scenario, the measured part starts warm: the accept path's code is compiled.
  context.log("async accept: warming up");
  await loadTest(url, { method: "POST", headers, body, durationSeconds: 2 });
  context.log("async accept: runplane");
  const ours = await loadTest(url, { method: "POST", headers, body, durationSeconds });
  const memory = await memoryOf(runplane.child.pid!);
  const met = ours.requestsPerSecond >= 5000 && ours.p99Ms < 10 && ours.non2xx === 0;
  const accept = (server: BenchServer, seconds: number) =>
    loadTest(`${server.url}/v4/${BENCH_PROJECT}/queue/run?async=true`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body,
      durationSeconds: seconds,
    });
  const half = Math.max(1, Math.round(durationSeconds / 2));
  const postgres = await postgresVersusSqlite(context, {
    scenario,
    target: "≥ 0.8× SQLite, p99 < 15 ms",
    met: (result, ratio) => ratio >= 0.8 && (result.p99Ms ?? Infinity) < 15,
    warmUp: (server) => accept(server, 2),
    measure: async (server) => {
      const result = await accept(server, half);
      return { rate: result.requestsPerSecond, p50Ms: result.p50Ms, p99Ms: result.p99Ms, failures: result.non2xx };
    },
  });
  return [
    row({
      scenario,
      subject: "bare Koa 202 (baseline)",
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
      peakRssMiB: memory.peakRssMiB,
      ratio: ours.requestsPerSecond / koa.requestsPerSecond,
      target: "≥ 5,000/s, p99 < 10 ms",
      met,
      note: ours.non2xx ? `${ours.non2xx} non-2xx` : "",
    }),
    postgres,
  ];
}
