import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { type BenchContext, row } from "../_context.ts";
import { descendantsOf, descendantsRssMiB, memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";
import { coldStartPartRows, replicaPython } from "./cold_start_parts.ts";
import { importMainArgs, targetRows, writeTargetApps } from "./cold_start_target.ts";
import { forkStartRows } from "./fork_start.ts";

const SCENARIO = "10. Cold start";
const PER_KIND = 50;
// Longer than the first calls of all 100 apps take, so every replica is still warm when they are counted.
const COOLDOWN_S = 30;
const run = promisify(execFile);

const PYTHON_MAIN = `def hello(name="world"):
    return {"hello": name}
`;

// A custom runtime as small as one gets: the standard library's HTTP server.
const CUSTOM_SERVER = `import json, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer(b'{"ok": true}')

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer(json.dumps({"hello": "world"}).encode())

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

function toml(name: string, kind: "python" | "custom"): string {
  const scaling = `[scaling]\nmin_replicas = 0\nmax_replicas = 1\ncooldown = ${COOLDOWN_S}\n`;
  if (kind === "python") return `[deployment]\nname = "${name}"\nruntime = "python"\n\n${scaling}`;
  return `[deployment]\nname = "${name}"\nruntime = "custom"\n\n${scaling}\n[runtime.custom]\n`
    + `entrypoint = ["python3", "server.py"]\nhealthcheck_endpoint = "/health"\n`;
}

/** 50 Python apps (`py-00` …) and 50 custom runtimes (`cu-00` …), all scaled to zero with a short cooldown. */
async function writeApps(appsDir: string): Promise<void> {
  for (let i = 0; i < PER_KIND; i++) {
    const id = String(i).padStart(2, "0");
    for (
      const [kind, name, file, source] of [
        ["python", `py-${id}`, "main.py", PYTHON_MAIN],
        ["custom", `cu-${id}`, "server.py", CUSTOM_SERVER],
      ] as const
    ) {
      const dir = join(appsDir, BENCH_PROJECT, name);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "runplane.toml"), toml(name, kind));
      await writeFile(join(dir, file), source);
    }
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function p99(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(0.99 * sorted.length))];
}

/** Wall time of `python args`, median of `times` runs. */
async function commandMs(python: string, args: string[], times = 15): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < times; i++) {
    const started = performance.now();
    await run(python, args);
    samples.push(performance.now() - started);
  }
  return median(samples);
}

/** Each app's first call, one after the other: from the request to the answer. */
async function firstCalls(server: BenchServer, apps: string[], fn: string): Promise<number[]> {
  const latencies: number[] = [];
  for (const app of apps) {
    const started = performance.now();
    const response = await fetch(`${server.url}/v4/${BENCH_PROJECT}/${app}/${fn}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`${app}/${fn} answered ${response.status}`);
    latencies.push(performance.now() - started);
  }
  return latencies;
}

/**
 * 10. Cold start: 100 apps scaled to zero (50 Python, 50 custom runtimes): each first call's latency
 * against `python3 -c pass` and the import of main.py measured in the same run (the floor, with the
 * interpreter a jailed replica runs), the idle memory of a warm replica, what the cooldown gives back,
 * forked replicas (`fork_start.ts`) and Runplane's own part of a cold start (`cold_start_parts.ts`).
 */
export async function coldStartScenario(context: BenchContext): Promise<BenchRow[]> {
  const appsDir = await mkdtemp(join(tmpdir(), "runplane-bench-cold-"));
  await writeApps(appsDir);
  await writeTargetApps(appsDir);
  const mainPy = join(appsDir, BENCH_PROJECT, "py-00", "main.py");
  context.log(`${SCENARIO}: floors (python3 -c pass, main.py's import)`);
  // The interpreter a jailed replica of `python = "python3"` runs, not a shim the bench's PATH may name.
  const interpreter = await replicaPython();
  const floorMs = await commandMs(interpreter, ["-c", "pass"]);
  const withMainMs = await commandMs(interpreter, importMainArgs(mainPy));
  const importMainMs = Math.max(0, withMainMs - floorMs);
  const server = await startRunplane({}, { appsDir });
  try {
    const pid = server.child.pid!;
    const serverIdle = await memoryOf(pid);
    const replicasBefore = (await descendantsOf(pid)).length;
    context.log(`${SCENARIO}: first calls of ${PER_KIND} Python apps`);
    const pyApps = Array.from({ length: PER_KIND }, (_, i) => `py-${String(i).padStart(2, "0")}`);
    const cuApps = Array.from({ length: PER_KIND }, (_, i) => `cu-${String(i).padStart(2, "0")}`);
    const python = await firstCalls(server, pyApps, "hello");
    // Warm: a second call of the last ten, at once (on a loaded host the first ten may be past their
    // cooldown by the time the custom runtimes are done).
    const warm = await firstCalls(server, pyApps.slice(-10), "hello");
    context.log(`${SCENARIO}: first calls of ${PER_KIND} custom runtimes`);
    const custom = await firstCalls(server, cuApps, "run");
    const warmProcesses = (await descendantsOf(pid)).length - replicasBefore;
    const warmRss = await descendantsRssMiB(pid);
    const serverWarm = await memoryOf(pid);
    // Replicas stop after one cooldown, their templates one cooldown after their last replica.
    context.log(`${SCENARIO}: waiting out the ${COOLDOWN_S} s cooldown, twice`);
    await new Promise((resolve) => setTimeout(resolve, (2 * COOLDOWN_S + 5) * 1000));
    const cooledProcesses = (await descendantsOf(pid)).length - replicasBefore;
    const cooledRss = await descendantsRssMiB(pid);
    const serverCooled = await memoryOf(pid);
    const target = 1.5 * floorMs + importMainMs;
    // After the cooldown: no other app's replica is left to share the host with.
    const ownPartRows = await targetRows(context, { server, interpreter, mainPy });
    const forkRows = await forkStartRows(context);
    const partRows = await coldStartPartRows(context, { httpFirstCallMs: median(python) });
    return [
      row({
        scenario: SCENARIO,
        subject: `${interpreter} -c pass (the floor)`,
        p50Ms: floorMs,
        note: `main.py's import adds ${
          importMainMs.toFixed(1)
        } ms; the worker harness's part: the Runplane's part rows`,
      }),
      row({
        scenario: SCENARIO,
        subject: `Python app, first call (${PER_KIND} apps)`,
        p50Ms: median(python),
        p99Ms: p99(python),
        ratio: median(python) / floorMs,
        target: `≤ 1.5× floor + main.py = ${target.toFixed(0)} ms`,
        met: median(python) <= target,
        note: `a warm call: ${median(warm).toFixed(1)} ms`,
      }),
      row({
        scenario: SCENARIO,
        subject: `custom runtime, first call (${PER_KIND} apps)`,
        p50Ms: median(custom),
        p99Ms: p99(custom),
        ratio: median(custom) / floorMs,
        target: "report",
        note: "python3 http.server, ready when /health answers (polled)",
      }),
      row({
        scenario: SCENARIO,
        subject: `${warmProcesses} warm replicas, idle`,
        peakRssMiB: serverWarm.peakRssMiB,
        target: "report",
        note: `replicas ${Math.round(warmRss)} MiB in all, ${
          (warmRss / Math.max(1, warmProcesses)).toFixed(1)
        } MiB each; server ${Math.round(serverIdle.rssMiB)} → ${Math.round(serverWarm.rssMiB)} MiB`,
      }),
      row({
        scenario: SCENARIO,
        subject: `after the ${COOLDOWN_S} s cooldown`,
        target: "replicas and templates stopped, memory returned",
        met: cooledProcesses === 0,
        note: `${cooledProcesses} replica processes left, ${Math.round(cooledRss)} MiB; server ${
          Math.round(serverCooled.rssMiB)
        } MiB`,
      }),
      ...ownPartRows,
      ...forkRows,
      ...partRows,
    ];
  } finally {
    await server.stop();
    await rm(appsDir, { recursive: true, force: true });
  }
}
