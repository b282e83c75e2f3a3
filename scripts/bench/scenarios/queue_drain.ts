import { cpus } from "node:os";
import { join } from "node:path";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { loadTest } from "../_load.ts";
import { busyCoresSince, cpuTimes } from "../_machine.ts";
import { type BenchDatabase, createBenchDatabase, postgresUnavailable } from "../_postgres.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const SCENARIO = "8. Queue drain";
const APPS = join(ROOT, "scripts", "bench", "drain_apps");
const TERMINAL = `('success', 'failure', 'cancelled')`;

/** One drain: how many processes, and what the database recorded. */
interface Drain {
  processes: number;
  /** Runs per second from the first claim to the last run's end (the database's `started_at`, `completed_at`). */
  rate: number;
  /**
   * Runs per second between the 10th and the 90th percentile of the runs' ends: without the start (a
   * second process starts a little after the first) and the tail.
   */
  steadyRate: number;
  succeeded: number;
  /** WAL bytes per run written while accepting, and while draining (cluster-wide: other sessions count too). */
  walAccept: number;
  walDrain: number;
  /** Bytes of the runs table with its indexes and TOAST, per run, once drained. */
  tableBytes: number;
  /** Runs each process finished (its `runplane_runs_finished_total`), in start order. */
  perProcess: number[];
  /** The machine's busy cores on average while the runs drained (every process: servers, workers, PostgreSQL). */
  busyCores: number;
}

async function finishedBy(server: BenchServer): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return text.split("\n").filter((line) => line.startsWith("runplane_runs_finished_total") && line.includes("drain"))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
}

/**
 * Queues `runs` async runs of the no-op app and drains them with `processes` servers sharing the database.
 * The runs are submitted through a first server whose version of the app has one slot, taken by a run
 * submitted before them that sleeps until it is cancelled: so every measured run is queued, none claimed,
 * when the draining servers start. Their first claims and last ends are read from the runs' own
 * `started_at` and `completed_at` (the database's clock).
 */
async function drain(context: BenchContext, runs: number, processes: number): Promise<Drain> {
  const database: BenchDatabase = await createBenchDatabase();
  const servers: BenchServer[] = [];
  let cancelHeld: (() => Promise<unknown>) | undefined;
  try {
    const submitter = await startRunplane({}, { databaseUrl: database.url, appsDir: join(APPS, "hold") });
    servers.push(submitter);
    const headers = { Authorization: `Bearer ${submitter.token}`, "Content-Type": "application/json" };
    const url = `${submitter.url}/v4/${BENCH_PROJECT}/drain/run?async=true`;
    const held = await (await fetch(url, { method: "POST", headers, body: "{}" })).json() as { run_id: string };
    const runUrl = `${submitter.url}/v4/projects/${BENCH_PROJECT}/apps/drain/runs/${held.run_id}`;
    cancelHeld = () => fetch(runUrl, { method: "DELETE", headers });
    for (let status = ""; status !== "running";) {
      status = ((await (await fetch(runUrl, { headers })).json()) as { status: string }).status;
      if (status !== "running") await new Promise((r) => setTimeout(r, 50));
    }
    const lsn = async () => (await database.query<{ lsn: string }>(`select pg_current_wal_lsn() as lsn`))[0].lsn;
    const walBytes = async (from: string, to: string) =>
      Number((await database.query<{ bytes: string }>(`select pg_wal_lsn_diff($1, $2) as bytes`, [to, from]))[0].bytes);
    const beforeAccept = await lsn();
    context.log(`queue drain: submitting ${runs} async runs`);
    const submitted = await loadTest(url, { method: "POST", headers, body: "{}", amount: runs, connections: 32 });
    if (submitted.non2xx || submitted.errors) {
      throw new Error(`${submitted.non2xx} non-2xx and ${submitted.errors} errors submitting ${runs} runs`);
    }
    const [{ queued }] = await database.query<{ queued: string }>(
      `select count(*) as queued from runs where status = 'queued'`,
    );
    if (Number(queued) !== runs) throw new Error(`${queued} runs queued, expected ${runs}`);

    const beforeDrain = await lsn();
    context.log(`queue drain: draining with ${processes} process${processes > 1 ? "es" : ""}`);
    const drainers = await Promise.all(
      Array.from(
        { length: processes },
        () => startRunplane({}, { databaseUrl: database.url, appsDir: join(APPS, "noop") }),
      ),
    );
    servers.push(...drainers);
    // From when the servers are up (their start-up uses about one core), to the last run's end.
    const cpuBeforeDrain = cpuTimes();
    const deadline = Date.now() + 600_000;
    for (;;) {
      const [{ done }] = await database.query<{ done: string }>(
        `select count(*) as done from runs where status in ${TERMINAL} and run_id <> $1`,
        [held.run_id],
      );
      if (Number(done) >= runs) break;
      if (Date.now() > deadline) throw new Error(`${done} of ${runs} runs ended within 10 minutes`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const busyCores = busyCoresSince(cpuBeforeDrain);
    const afterDrain = await lsn();
    const perProcess = await Promise.all(drainers.map(finishedBy));
    const [{ size }] = await database.query<{ size: string }>(`select pg_total_relation_size('runs') as size`);
    const [figures] = await database.query<
      { succeeded: string; first: string; last: string; p10: string; p90: string }
    >(
      `select count(*) filter (where status = 'success') as succeeded, min(started_at) as first,`
        + ` max(completed_at) as last, percentile_disc(0.1) within group (order by completed_at) as p10,`
        + ` percentile_disc(0.9) within group (order by completed_at) as p90 from runs where run_id <> $1`,
      [held.run_id],
    );
    const succeeded = Number(figures.succeeded);
    return {
      processes,
      rate: succeeded / ((Number(figures.last) - Number(figures.first)) / 1000),
      steadyRate: (0.8 * runs) / ((Number(figures.p90) - Number(figures.p10)) / 1000),
      succeeded,
      walAccept: (await walBytes(beforeAccept, beforeDrain)) / runs,
      walDrain: (await walBytes(beforeDrain, afterDrain)) / runs,
      tableBytes: Number(size) / (runs + 1),
      perProcess,
      busyCores,
    };
  } finally {
    // The held run is cancelled first, so the submitting server stops at once.
    if (cancelHeld) await cancelHeld().catch(() => {});
    for (const server of servers.reverse()) await server.stop();
    await database.drop();
  }
}

/**
 * 8. Draining a queue of `BENCH_DRAIN_RUNS` (default 10,000) async runs of a no-op function with one
 * server process and with two sharing one PostgreSQL database, in `BENCH_DRAIN_ROUNDS` (default 2)
 * rounds of 1-2 then 2-1 processes, each round on a fresh database.
 */
export async function queueDrainScenario(context: BenchContext): Promise<BenchRow[]> {
  const runs = Number(process.env.BENCH_DRAIN_RUNS ?? 10_000);
  const rounds = Number(process.env.BENCH_DRAIN_ROUNDS ?? 2);
  const unavailable = await postgresUnavailable();
  if (unavailable) {
    return [row({ scenario: SCENARIO, subject: "2 processes vs 1", target: "≥ 1.5× one process", note: unavailable })];
  }
  const drains: Drain[] = [];
  for (let round = 0; round < rounds; round++) {
    for (const processes of round % 2 === 0 ? [1, 2] : [2, 1]) {
      context.log(`queue drain: round ${round + 1} of ${rounds}, ${processes} process(es), ${runs} runs`);
      drains.push(await drain(context, runs, processes));
    }
  }
  const of = (processes: number) => drains.filter((d) => d.processes === processes);
  const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;
  const one = of(1);
  const two = of(2);
  const lost = drains.filter((d) => d.succeeded !== runs).length;
  const common = `${runs.toLocaleString("en-US")} queued runs, ${rounds} round(s)`;
  const oneRate = mean(one.map((d) => d.rate));
  const twoRate = mean(two.map((d) => d.rate));
  const ratio = twoRate / oneRate;
  // How much of the machine a drain used: a second process can only add what one left idle.
  const cores = (drains: Drain[]) =>
    `${mean(drains.map((d) => d.busyCores)).toFixed(2)} of ${cpus().length} cores busy while draining`;
  return [
    row({
      scenario: SCENARIO,
      subject: "1 process (baseline)",
      throughput: oneRate,
      unit: "runs/s",
      note: `${common}; rounds ${one.map((d) => Math.round(d.rate)).join(", ")} runs/s; p10–p90 of ends ${
        Math.round(mean(one.map((d) => d.steadyRate)))
      } runs/s; per run: WAL ${Math.round(mean(one.map((d) => d.walAccept)))} B accepting + ${
        Math.round(mean(one.map((d) => d.walDrain)))
      } B draining (cluster-wide), runs table ${Math.round(mean(one.map((d) => d.tableBytes)))} B; ${cores(one)}`,
    }),
    row({
      scenario: SCENARIO,
      subject: "2 processes, one PostgreSQL",
      throughput: twoRate,
      unit: "runs/s",
      ratio,
      target: "≥ 1.5× one process",
      met: ratio >= 1.5 && lost === 0,
      note: `${common}; rounds ${two.map((d) => Math.round(d.rate)).join(", ")} runs/s; p10–p90 of ends ${
        Math.round(mean(two.map((d) => d.steadyRate)))
      } runs/s (${(mean(two.map((d) => d.steadyRate)) / mean(one.map((d) => d.steadyRate))).toFixed(2)}×); split ${
        two.map((d) => d.perProcess.join("/")).join(", ")
      }; ${cores(two)}${lost ? `; ${lost} drain(s) did not end every run success` : ""}`,
    }),
  ];
}
