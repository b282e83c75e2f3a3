/**
 * What the sandbox costs: a Python replica's cold start (process, worker, handshake, first call) jailed
 * with and without egress against unjailed, and warm synchronous calls through a jailed server against
 * one with `RUNPLANE_SANDBOX=off` — each pair in alternating rounds, so the host's drift hits both.
 */
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "../../../server/log.ts";
import { PythonReplica } from "../../../server/runtime/mod.ts";
import {
  type Cgroups,
  createSandbox,
  type ImageRoot,
  type Sandbox,
  unjailedSandbox,
} from "../../../server/sandbox/mod.ts";
import { type BenchContext, row } from "../_context.ts";
import { type LoadResult, loadTest } from "../_load.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const SCENARIO = "14. Sandbox";
const ROUNDS = 15;

/** The middle of `values`. */
export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/**
 * Milliseconds from spawning a replica (in the image root `image` when given: its `/usr/bin/python3`) (its cgroup made first, when `cgroups` is given; removed after) to
 * the end of its first call.
 */
export async function coldStart(
  sandbox: Sandbox,
  appDir: string,
  options: { egress: boolean; cgroups?: Cgroups; python?: string; image?: ImageRoot },
): Promise<number> {
  const started = performance.now();
  const cgroup = options.cgroups?.create("p-bench/cold", { cpu: 1, memoryBytes: 512 * 1024 ** 2 }) ?? undefined;
  const replica = new PythonReplica({
    appDir,
    label: "p-bench/cold",
    // The same interpreter both ways (PATH may name a shim outside the jail that it would not see).
    python: options.python ?? "/usr/bin/python3",
    concurrency: 1,
    logger: createLogger({ level: "silent" }),
    sandbox,
    jail: {
      projectId: BENCH_PROJECT,
      cwd: appDir,
      readOnly: [appDir],
      egress: options.egress,
      env: {},
      image: options.image,
    },
    cgroup,
  });
  const elapsed = await untilFirstCall(replica, started);
  await cgroup?.remove();
  return elapsed;
}

/** Ms from `started` until `replica` is ready and has answered a call of `hello`; stops it after. */
export async function untilFirstCall(replica: PythonReplica, started: number): Promise<number> {
  await replica.ready;
  await replica.call({
    runId: `run_bench_${Math.round(started)}`,
    functionName: "hello",
    kwargs: {},
    graceMs: 10_000,
    onSettled: () => undefined,
  });
  const elapsed = performance.now() - started;
  await replica.stop();
  return elapsed;
}

async function coldStartRows(context: BenchContext): Promise<BenchRow[]> {
  const jailed = await createSandbox("required", { logger: createLogger({ level: "silent" }) });
  const plain = unjailedSandbox();
  const appDir = await mkdtemp(join(tmpdir(), "runplane-bench-sandbox-"));
  await chmod(appDir, 0o755);
  await writeFile(join(appDir, "main.py"), "def hello():\n    return {'hello': 'world'}\n");
  const times = { plain: [] as number[], closed: [] as number[], open: [] as number[] };
  try {
    await coldStart(plain, appDir, { egress: false });
    await coldStart(jailed, appDir, { egress: true });
    for (let round = 0; round < ROUNDS; round++) {
      if (round % 5 === 0) context.log(`sandbox: cold starts, round ${round + 1} of ${ROUNDS}`);
      times.plain.push(await coldStart(plain, appDir, { egress: false }));
      times.closed.push(await coldStart(jailed, appDir, { egress: false }));
      times.open.push(await coldStart(jailed, appDir, { egress: true }));
    }
  } finally {
    jailed.close();
    plain.close();
    await rm(appDir, { recursive: true, force: true });
  }
  const base = median(times.plain);
  const subject = (name: string, values: number[], note: string) =>
    row({
      scenario: SCENARIO,
      subject: name,
      unit: "ms",
      p50Ms: median(values),
      p99Ms: Math.max(...values),
      ratio: median(values) / base,
      target: "cold start ≤ +15 ms",
      met: median(values) - base <= 15,
      note: `${note}: +${(median(values) - base).toFixed(1)} ms over unjailed (${
        base.toFixed(1)
      } ms), medians of ${ROUNDS}`,
    });
  return [
    row({
      scenario: SCENARIO,
      subject: "cold start, unjailed",
      unit: "ms",
      p50Ms: base,
      p99Ms: Math.max(...times.plain),
    }),
    subject("cold start, jailed, no egress", times.closed, "bubblewrap, seccomp, setpriv"),
    subject("cold start, jailed, egress", times.open, "and slirp4netns with its routes"),
  ];
}

async function warmRows(context: BenchContext): Promise<BenchRow[]> {
  const { runplane, durationSeconds } = context;
  const unjailed: BenchServer = await startRunplane({ RUNPLANE_SANDBOX: "off" });
  const call = (server: BenchServer, seconds: number) =>
    loadTest(`${server.url}/v4/${BENCH_PROJECT}/echo/run`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ name: "bench" }),
      durationSeconds: seconds,
    });
  try {
    await call(unjailed, 2);
    await call(runplane, 2);
    const half = Math.max(1, Math.round(durationSeconds / 2));
    const off: LoadResult[] = [];
    const on: LoadResult[] = [];
    for (let round = 0; round < 2; round++) {
      context.log(`sandbox: warm calls jailed vs unjailed, round ${round + 1} of 2`);
      on.push(await call(runplane, half));
      off.push(await call(unjailed, half));
    }
    const rate = (results: LoadResult[]) => results.reduce((sum, r) => sum + r.requestsPerSecond, 0) / results.length;
    return [
      row({
        scenario: SCENARIO,
        subject: "warm sync calls, jailed vs unjailed",
        throughput: rate(on),
        p50Ms: on.reduce((sum, r) => sum + r.p50Ms, 0) / on.length,
        p99Ms: Math.max(...on.map((r) => r.p99Ms)),
        ratio: rate(on) / rate(off),
        target: "within noise (≥ 0.95×)",
        met: rate(on) / rate(off) >= 0.95,
        note: `unjailed: ${Math.round(rate(off))} req/s in the same alternating rounds`,
      }),
    ];
  } finally {
    await unjailed.stop();
  }
}

/** The sandbox's cost on cold starts and on warm calls. */
export async function sandboxCostScenario(context: BenchContext): Promise<BenchRow[]> {
  return [...(await coldStartRows(context)), ...(await warmRows(context))];
}
