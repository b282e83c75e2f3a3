import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT } from "../../_root.ts";
import type { Store } from "../../../server/store/mod.ts";
import { addRuns } from "../_bulk_runs.ts";
import { type BenchContext, row } from "../_context.ts";
import { loadTest } from "../_load.ts";
import { createBenchDatabase, postgresUnavailable } from "../_postgres.ts";
import type { BenchRow } from "../_report.ts";
import { sampleLatency } from "../_sample.ts";
import { BENCH_PROJECT, type BenchServer, openServerStore, startRunplane } from "../_runplane.ts";

const SCENARIO = "13. Async backlog";
const BACKLOG = Number(process.env.BENCH_BACKLOG_RUNS ?? 100_000);
/** The drain scenario's app: `hold` (one slot, a run that sleeps) and `noop` (two replicas of 16 slots). */
const APPS = join(ROOT, "scripts", "bench", "drain_apps");
const DISPATCH_WINDOW_S = 10;

async function queuedRuns(store: Store): Promise<number> {
  const row = await store.db.selectFrom("runs").select((eb) => eb.fn.countAll().as("n"))
    .where("status", "=", "queued").executeTakeFirstOrThrow();
  return Number(row.n);
}

function accept(server: BenchServer, seconds: number) {
  return loadTest(`${server.url}/v4/${BENCH_PROJECT}/drain/run?async=true`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: "{}",
    durationSeconds: seconds,
  });
}

/**
 * One engine. On a server whose app has one slot, held by a long run (so nothing drains): accept with
 * an empty queue, then with the backlog queued ahead, and listRuns?status=queued. Then a server on the
 * same store whose app version is a no-op with 32 slots: the rate it dispatches the backlog at.
 */
async function onEngine(context: BenchContext, engine: "sqlite" | "postgres"): Promise<BenchRow[]> {
  const database = engine === "postgres" ? await createBenchDatabase() : null;
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-bench-backlog-"));
  const env = { RUNPLANE_DRAIN_TIMEOUT: "1s" };
  let server = await startRunplane(env, { dataDir, databaseUrl: database?.url, appsDir: join(APPS, "hold") });
  let store: Store | undefined;
  try {
    const held = await fetch(`${server.url}/v4/${BENCH_PROJECT}/drain/run?async=true`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    if (held.status !== 202) throw new Error(`holding run answered ${held.status}`);
    context.log(`${SCENARIO}: ${engine}, accept with an empty queue`);
    await accept(server, 2);
    const empty = await accept(server, 6);
    context.log(`${SCENARIO}: ${engine}, queueing ${BACKLOG.toLocaleString("en-US")} runs`);
    store = await openServerStore(server);
    await addRuns(store, { from: 1, to: BACKLOG, kind: "queued", app: "drain", createdAt: Date.now() });
    const withBacklog = await accept(server, 6);
    const list = await sampleLatency(
      () => `${server.url}/v4/projects/${BENCH_PROJECT}/apps/drain/runs?status=queued&limit=50`,
      { headers: { Authorization: `Bearer ${server.token}` } },
    );
    await server.stop();
    context.log(`${SCENARIO}: ${engine}, dispatching with the no-op version`);
    server = await startRunplane(env, { dataDir, databaseUrl: database?.url, appsDir: join(APPS, "noop") });
    const from = await queuedRuns(store);
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, DISPATCH_WINDOW_S * 1000));
    const to = await queuedRuns(store);
    const dispatchRate = (from - to) / ((performance.now() - started) / 1000);
    const ratio = withBacklog.requestsPerSecond / empty.requestsPerSecond;
    return [
      row({
        scenario: SCENARIO,
        subject: `${engine}: accept, queue empty (baseline)`,
        throughput: empty.requestsPerSecond,
        p50Ms: empty.p50Ms,
        p99Ms: empty.p99Ms,
      }),
      row({
        scenario: SCENARIO,
        subject: `${engine}: accept, ${BACKLOG.toLocaleString("en-US")} queued ahead`,
        throughput: withBacklog.requestsPerSecond,
        p50Ms: withBacklog.p50Ms,
        p99Ms: withBacklog.p99Ms,
        ratio,
        target: "p99 as with an empty queue",
        met: withBacklog.p99Ms <= Math.max(empty.p99Ms * 1.5, empty.p99Ms + 2) && withBacklog.non2xx === 0,
        note: withBacklog.non2xx ? `${withBacklog.non2xx} non-2xx` : "",
      }),
      row({
        scenario: SCENARIO,
        subject: `${engine}: listRuns?status=queued, first page`,
        throughput: list.perSecond,
        p50Ms: list.p50Ms,
        p99Ms: list.p99Ms,
        target: "report",
        note: `8 callers${list.failures ? `; ${list.failures} failed` : ""}`,
      }),
      row({
        scenario: SCENARIO,
        subject: `${engine}: dispatch of the backlog (no-op function, 32 slots)`,
        throughput: dispatchRate,
        unit: "runs/s",
        target: "report",
        note: `${(from - to).toLocaleString("en-US")} runs in ${DISPATCH_WINDOW_S} s, ${
          to.toLocaleString("en-US")
        } still queued`,
      }),
    ];
  } finally {
    await store?.close();
    await server.stop();
    await rm(dataDir, { recursive: true, force: true });
    await database?.drop();
  }
}

/** 13. Async backlog: 100,000 queued runs ahead: accept p99, the dispatch rate, `listRuns?status=queued`. */
export async function asyncBacklogScenario(context: BenchContext): Promise<BenchRow[]> {
  const rows = await onEngine(context, "sqlite");
  const unavailable = await postgresUnavailable();
  if (unavailable) return [...rows, row({ scenario: SCENARIO, subject: "postgres", note: unavailable })];
  return [...rows, ...await onEngine(context, "postgres")];
}
