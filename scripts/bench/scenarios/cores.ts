/**
 * `npm run bench -- --scenario cores` (issue 33): what one host serves against the number of processes
 * on it, with everything side by side in one run. For each count n (1, 2, 4, … up to the cores): bare
 * `node:http` in n processes (the floor), aiohttp in n processes (what a user of one big machine gets
 * without us) and Runplane with n replicas, each driven at concurrency 64 with the sync echo call and
 * with a function that burns 2 ms of CPU; subjects alternate within rounds, so the host's drift hits
 * each alike. Runplane's rows say how much of its front door's CPU (the Node process alone) each call
 * cost. With n > 1 it runs twice: one front door (the single event loop's limit), and
 * `RUNPLANE_WORKERS=n` (n workers sharing the port, and their supervisor, whose CPU counts as front
 * door too). Runs only when named; needs python3-aiohttp.
 */
import { execFileSync } from "node:child_process";
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { type LoadResult, loadTest } from "../_load.ts";
import { type BenchProcess, cpuSeconds, descendantsOf, startProcess } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, startRunplane } from "../_runplane.ts";

const SCENARIO = "18. cores";
const CONCURRENCY = 64;
/** Each workload's request body. */
const BODIES = { echo: JSON.stringify({ name: "bench" }), spin: JSON.stringify({ ms: 2 }) } as const;
const CORES_MAIN = join(ROOT, "scripts", "bench", "apps_cores", "cores_main.py");
/**
 * The worker counts Runplane runs with beside its one front door for n replicas: n (n > 1), or
 * `BENCH_CORES_WORKERS` (`n,n/2`: fractions of n, rounded up; a lent machine's question of the default).
 */
function workerCounts(n: number): number[] {
  const named = process.env.BENCH_CORES_WORKERS?.split(",").map((part) => {
    const [numerator, denominator] = part.replace(/n/g, String(n)).split("/").map(Number);
    return Math.ceil(numerator / (denominator || 1));
  });
  return [...new Set(named ?? [n])].filter((count) => count > 1);
}

/**
 * Debian's interpreter, where `apt-get install python3-aiohttp` puts aiohttp (as the FastAPI peer's);
 * `BENCH_PEER_PYTHON` names another (a machine whose aiohttp lives in a virtualenv).
 */
const PEER_PYTHON = process.env.BENCH_PEER_PYTHON ?? "/usr/bin/python3";

/** The two workloads: the echo call, and a function that burns 2 ms of CPU. */
type Workload = "echo" | "spin";

/** One subject running with n processes: where to send each workload, and whose CPU is its front door's. */
interface Running {
  name: string;
  url(workload: Workload): string;
  headers: Record<string, string>;
  /** The processes whose CPU a call costs (Runplane's front door; the floor's processes, for comparison). */
  frontDoor: number[];
  stop(): Promise<void>;
}

/**
 * The counts measured: powers of two up to the cores, the cores less two past 8 (the issue's 14), the
 * cores; `BENCH_CORES_COUNTS=1,4,8,14` names them instead (a machine lent for minutes).
 */
export function processCounts(cores: number): number[] {
  const named = process.env.BENCH_CORES_COUNTS?.split(",").map(Number).filter((n) => n > 0);
  if (named?.length) return named;
  const counts = new Set<number>();
  for (let n = 1; n <= cores; n *= 2) counts.add(n);
  if (cores > 8) counts.add(cores - 2);
  counts.add(cores);
  return [...counts].sort((a, b) => a - b);
}

function aiohttpInstalled(): boolean {
  try {
    execFileSync(PEER_PYTHON, ["-c", "import aiohttp"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

async function startFloor(n: number): Promise<Running> {
  const server: BenchProcess = await startProcess(process.execPath, {
    args: ["--import", "tsx", join(ROOT, "scripts", "bench", "peers", "node_http_echo.ts")],
    cwd: ROOT,
    env: { WORKERS: String(n) },
  });
  const frontDoor = [server.child.pid!, ...(await workerPids(server.child.pid!))];
  return { name: `node:http, ${n} process(es)`, url: () => server.url, headers: {}, frontDoor, stop: server.stop };
}

async function startAiohttp(n: number): Promise<Running> {
  const server = await startProcess(PEER_PYTHON, {
    args: [join(ROOT, "scripts", "bench", "peers", "aiohttp_app.py")],
    env: { WORKERS: String(n) },
  });
  return {
    name: `aiohttp, ${n} process(es)`,
    url: (workload) => `${server.url}/${workload === "echo" ? "run" : "spin"}`,
    headers: {},
    frontDoor: [],
    stop: server.stop,
  };
}

/** The supervisor's workers: its children that run Node (its replicas run Python). */
async function workerPids(supervisor: number): Promise<number[]> {
  const found: number[] = [];
  for (const pid of await descendantsOf(supervisor)) {
    const command = await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
    if (command.split("\0")[0] === process.execPath) found.push(pid);
  }
  return found;
}

/**
 * Runplane serving the scenario's app with n warm replicas sharing the 64 calls in flight, behind one
 * front door or (`workers`) that many workers and their supervisor.
 */
async function startRunplaneWith(n: number, options: { workers?: number } = {}): Promise<Running> {
  const appsDir = await mkdtemp(join(tmpdir(), "runplane-bench-cores-"));
  const app = join(appsDir, BENCH_PROJECT, "cores");
  await mkdir(app, { recursive: true });
  await copyFile(CORES_MAIN, join(app, "main.py"));
  const concurrency = Math.ceil(CONCURRENCY / n);
  await writeFile(
    join(app, "runplane.toml"),
    `[deployment]\nname = "cores"\n\n[scaling]\nmin_replicas = ${n}\nmax_replicas = ${n}\n`
      + `replica_concurrency = ${concurrency}\n`,
  );
  const workers = options.workers ?? 1;
  const server = await startRunplane(workers > 1 ? { RUNPLANE_WORKERS: String(workers) } : {}, { appsDir });
  const frontDoor = [server.child.pid!, ...(workers > 1 ? await workerPids(server.child.pid!) : [])];
  return {
    name: `runplane, ${workers > 1 ? `${workers} workers` : "1 front door"}, ${n} replica(s) × ${concurrency}`,
    url: (workload) => `${server.url}/v4/${BENCH_PROJECT}/cores/${workload === "echo" ? "run" : "spin"}`,
    headers: { Authorization: `Bearer ${server.token}` },
    frontDoor,
    async stop() {
      await server.stop();
      await rm(appsDir, { recursive: true, force: true });
    },
  };
}

/** One load run, with the front door's CPU per call (µs) when the subject names its front door. */
async function measure(
  subject: Running,
  options: { workload: Workload; seconds: number },
): Promise<LoadResult & { cpuUsPerCall: number | null }> {
  const before = await cpuSeconds(subject.frontDoor);
  const result = await loadTest(subject.url(options.workload), {
    method: "POST",
    headers: { ...subject.headers, "Content-Type": "application/json" },
    body: BODIES[options.workload],
    connections: CONCURRENCY,
    durationSeconds: options.seconds,
  });
  const cpu = (await cpuSeconds(subject.frontDoor)) - before;
  const cpuUsPerCall = subject.frontDoor.length && result.total ? (cpu * 1e6) / result.total : null;
  return { ...result, cpuUsPerCall };
}

/** Several runs of one subject taken as one: their mean throughput and p50, worst p99, mean CPU per call. */
function merged(results: Array<LoadResult & { cpuUsPerCall: number | null }>) {
  const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
  const cpu = results.map((r) => r.cpuUsPerCall).filter((c): c is number => c !== null);
  return {
    throughput: mean(results.map((r) => r.requestsPerSecond)),
    p50Ms: mean(results.map((r) => r.p50Ms)),
    p99Ms: Math.max(...results.map((r) => r.p99Ms)),
    failed: results.reduce((sum, r) => sum + r.non2xx + r.errors, 0),
    cpuUsPerCall: cpu.length ? mean(cpu) : null,
  };
}

/**
 * Issue 50's per-call target: a sync echo call's front-door CPU, absolute or against bare node:http's CPU
 * per request in the same rounds (the ratio is the one that holds on a drifting host).
 */
const PER_CALL = { maxUs: 60, maxTimesFloor: 2.5 };

/** The issue's targets, where this row is one they name. */
function targetOf(options: { workload: Workload; n: number; runplane: boolean }): string {
  if (!options.runplane) return "";
  if (options.workload === "echo" && options.n === 1) {
    return `≤ ${PER_CALL.maxUs} µs front-door CPU per call, or ≤ ${PER_CALL.maxTimesFloor}× bare node:http's`;
  }
  if (options.workload === "echo" && options.n === 8) return "≥ 0.8× aiohttp (16-core host)";
  if (options.workload === "spin" && options.n === 14) return "≥ 0.9× aiohttp (16-core host)";
  return "report";
}

/** Measures every subject with n processes, in alternating rounds, and returns their rows. */
async function measureCount(context: BenchContext, n: number): Promise<BenchRow[]> {
  const subjects = [await startFloor(n), await startAiohttp(n), await startRunplaneWith(n)];
  for (const workers of workerCounts(n)) subjects.push(await startRunplaneWith(n, { workers }));
  try {
    const seconds = Math.max(2, Math.round(context.durationSeconds / 2));
    const runs = new Map<string, Array<LoadResult & { cpuUsPerCall: number | null }>>();
    // A front door is a long-lived process: its first seconds under load (V8 compiling the hot paths)
    // cost a third more CPU per call than its steady state, so every subject warms up as long as a round.
    for (const subject of subjects) {
      for (const workload of ["echo", "spin"] as const) await measure(subject, { workload, seconds });
    }
    for (let round = 0; round < 2; round++) {
      for (const workload of ["echo", "spin"] as const) {
        for (const subject of subjects) {
          if (workload === "spin" && subject === subjects[0]) continue; // the floor has no function to run
          context.log(`cores: n=${n}, round ${round + 1} of 2, ${workload}, ${subject.name}`);
          const key = `${workload}\u0000${subject.name}`;
          runs.set(key, [...(runs.get(key) ?? []), await measure(subject, { workload, seconds })]);
        }
      }
    }
    const rows: BenchRow[] = [];
    const floor = merged(runs.get(`echo\u0000${subjects[0].name}`)!);
    for (const workload of ["echo", "spin"] as const) {
      const peer = merged(runs.get(`${workload}\u0000${subjects[1].name}`)!);
      for (const subject of subjects) {
        const found = runs.get(`${workload}\u0000${subject.name}`);
        if (!found) continue;
        const figures = merged(found);
        const runplane = subjects.indexOf(subject) >= 2;
        // The workers' row beside the one front door with as many replicas, from the same rounds.
        const single = subjects.indexOf(subject) >= 3
          ? merged(runs.get(`${workload}\u0000${subjects[2].name}`)!)
          : null;
        const target = targetOf({ workload, n, runplane });
        const ratio = runplane ? figures.throughput / peer.throughput : null;
        const met = target.startsWith("≤")
          ? figures.cpuUsPerCall !== null
            && (figures.cpuUsPerCall <= PER_CALL.maxUs
              || (floor.cpuUsPerCall !== null && figures.cpuUsPerCall / floor.cpuUsPerCall <= PER_CALL.maxTimesFloor))
          : target.startsWith("≥")
          ? ratio !== null && ratio >= Number(/([\d.]+)×/.exec(target)![1])
          : null;
        rows.push(row({
          scenario: SCENARIO,
          subject: `${workload === "echo" ? "sync echo" : "2 ms CPU"}: ${subject.name}`,
          throughput: figures.throughput,
          p50Ms: figures.p50Ms,
          p99Ms: figures.p99Ms,
          ratio,
          target,
          met,
          note: [
            figures.cpuUsPerCall !== null && subject === subjects[0]
              ? `${Math.round(figures.cpuUsPerCall)} µs of CPU per request`
              : "",
            figures.cpuUsPerCall !== null && runplane
              ? `${Math.round(figures.cpuUsPerCall)} µs of front-door CPU per call`
              : "",
            // The host's speed drifts (bare node:http's CPU per request varied 1.6x within an hour):
            // Runplane's sync call against the floor's request in the same rounds is the steadier figure.
            workload === "echo" && runplane && figures.cpuUsPerCall !== null && floor.cpuUsPerCall
              ? `${(figures.cpuUsPerCall / floor.cpuUsPerCall).toFixed(1)}× bare node:http's CPU per request`
              : "",
            runplane ? "ratio: against aiohttp with as many processes" : "",
            single ? `${(figures.throughput / single.throughput).toFixed(2)}× one front door in the same rounds` : "",
            figures.failed ? `${figures.failed} failed` : "",
          ].filter(Boolean).join("; "),
        }));
      }
    }
    return rows;
  } finally {
    for (const subject of subjects) await subject.stop();
  }
}

/** The scenario: every process count, one after the other. */
export async function coresScenario(context: BenchContext): Promise<BenchRow[]> {
  if (!aiohttpInstalled()) {
    context.log(`cores: ${PEER_PYTHON} cannot import aiohttp (apt-get install python3-aiohttp): skipped`);
    return [row({ scenario: SCENARIO, subject: "skipped", note: "python3-aiohttp is not installed" })];
  }
  const rows: BenchRow[] = [];
  for (const n of processCounts(cpus().length)) rows.push(...(await measureCount(context, n)));
  return rows;
}
