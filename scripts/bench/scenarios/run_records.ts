import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "kysely";
import { encodeCursor } from "../../../server/runs/mod.ts";
import type { Store } from "../../../server/store/mod.ts";
import { addRuns, bulkRunId } from "../_bulk_runs.ts";
import { type BenchContext, row } from "../_context.ts";
import { loadTest } from "../_load.ts";
import { createBenchDatabase, postgresUnavailable } from "../_postgres.ts";
import type { BenchRow } from "../_report.ts";
import { sampleLatency } from "../_sample.ts";
import { BENCH_PROJECT, type BenchServer, openServerStore, startRunplane } from "../_runplane.ts";

const SCENARIO = "11. Run records";
const SIZES = (process.env.BENCH_RECORD_SIZES ?? "10000,100000,1000000").split(",").map(Number);
const DAY = 86_400_000;
/** How long sync calls are measured while the purge runs. */
const PURGE_WINDOW_S = 20;

/** The store's bytes per run: the SQLite file (after a checkpoint), or `runs` with its indexes. */
async function bytesPerRun(store: Store, server: BenchServer, runs: number): Promise<number> {
  if (store.engine === "postgres") {
    const { rows } = await sql<{ bytes: number }>`select pg_total_relation_size('runs')::bigint as bytes`.execute(
      store.db,
    );
    return Number(rows[0].bytes) / runs;
  }
  await sql`pragma wal_checkpoint(truncate)`.execute(store.db);
  return (await stat(join(server.dataDir, "runplane.sqlite3"))).size / runs;
}

interface QueryFigures {
  name: string;
  p50Ms: number;
  p99Ms: number;
  failures: number;
}

/** getRun and three listRuns shapes, each sampled for 3 s with 8 callers. */
async function measureQueries(server: BenchServer, runs: number): Promise<QueryFigures[]> {
  const headers = { Authorization: `Bearer ${server.token}` };
  const base = `${server.url}/v4/projects/${BENCH_PROJECT}/apps`;
  // Row n belongs to app-(n % 10): a random row of app-3, and a cursor halfway through its runs.
  const randomRow = () => Math.floor(Math.random() * runs / 10) * 10 + 3;
  const middle = encodeCursor(bulkRunId(Math.floor(runs / 20) * 10 + 3));
  const shapes: Array<[string, () => string]> = [
    ["getRun", () => `${base}/app-3/runs/${bulkRunId(randomRow())}`],
    ["listRuns, one app", () => `${base}/app-3/runs?limit=50`],
    ["listRuns, status=failure", () => `${base}/app-3/runs?limit=50&status=failure`],
    ["listRuns, deep cursor", () => `${base}/app-3/runs?limit=50&cursor=${middle}`],
  ];
  const figures: QueryFigures[] = [];
  for (const [name, url] of shapes) {
    const sample = await sampleLatency(url, { headers });
    figures.push({ name, p50Ms: sample.p50Ms, p99Ms: sample.p99Ms, failures: sample.failures });
  }
  return figures;
}

/** Sync calls of the echo app for `seconds`: their p99 (autocannon, 8 connections). */
async function syncLoad(server: BenchServer, seconds: number) {
  return await loadTest(`${server.url}/v4/${BENCH_PROJECT}/echo/run`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ name: "bench" }),
    durationSeconds: seconds,
    connections: 8,
  });
}

/** Runs that ended at or before `before` with their results gone: what the purge deletes (an index range). */
async function countExpired(store: Store, before: number): Promise<number> {
  const row = await store.db.selectFrom("runs").select((eb) => eb.fn.countAll().as("n"))
    .where("result_expired", "=", 1).where("completed_at", "<=", before).executeTakeFirstOrThrow();
  return Number(row.n);
}

/** One engine: the sizes one after the other in one store, then the purge of all of them. */
async function onEngine(context: BenchContext, engine: "sqlite" | "postgres"): Promise<BenchRow[]> {
  const database = engine === "postgres" ? await createBenchDatabase() : null;
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-bench-records-"));
  const options = { dataDir, databaseUrl: database?.url };
  const rows: BenchRow[] = [];
  const createdAt = Date.now() - 29 * DAY;
  let server = await startRunplane({}, options);
  try {
    const firsts = new Map<string, number>();
    let store = await openServerStore(server);
    let inserted = 0;
    for (const size of SIZES) {
      context.log(`${SCENARIO}: ${engine}, adding runs up to ${size.toLocaleString("en-US")}`);
      await addRuns(store, { from: inserted + 1, to: size, kind: "ended", createdAt });
      inserted = size;
      // As autovacuum would have by now (a bulk insert leaves the statistics of an empty table).
      if (engine === "postgres") await sql`analyze runs`.execute(store.db);
      const bytes = await bytesPerRun(store, server, size);
      for (const figures of await measureQueries(server, size)) {
        const first = firsts.get(figures.name) ?? figures.p99Ms;
        firsts.set(figures.name, first);
        const growth = figures.p99Ms / first;
        rows.push(row({
          scenario: SCENARIO,
          subject: `${engine}, ${size.toLocaleString("en-US")} runs: ${figures.name}`,
          p50Ms: figures.p50Ms,
          p99Ms: figures.p99Ms,
          ratio: growth,
          target: size === SIZES[0] ? "baseline" : "p99 ≤ 2× the smallest size's",
          met: size === SIZES[0] ? null : growth <= 2 && figures.failures === 0,
          note: [
            figures.name === "getRun" ? `${Math.round(bytes)} bytes of store per run` : "",
            figures.failures ? `${figures.failures} failed` : "",
          ].filter(Boolean).join("; "),
        }));
      }
    }
    await store.close();

    context.log(`${SCENARIO}: ${engine}, sync calls idle`);
    const idle = await syncLoad(server, 8);
    await server.stop();
    // Every record ended 40 days ago: past the 30-day retention, due for the purge at the next start.
    store = await openServerStore(server);
    const endedAt = Date.now() - 40 * DAY;
    await store.db.updateTable("runs").set({ completed_at: endedAt, result_expired: 1, result_json: null }).execute();
    const before = await countExpired(store, endedAt);
    await store.close();
    context.log(
      `${SCENARIO}: ${engine}, sync calls while ${before.toLocaleString("en-US")} expired records are purged`,
    );
    server = await startRunplane({}, options);
    const started = performance.now();
    const during = await syncLoad(server, PURGE_WINDOW_S);
    const seconds = (performance.now() - started) / 1000;
    store = await openServerStore(server);
    const left = await countExpired(store, endedAt);
    await store.close();
    const purged = before - left;
    const ratio = during.p99Ms / idle.p99Ms;
    rows.push(
      row({
        scenario: SCENARIO,
        subject: `${engine}: sync calls, idle (baseline)`,
        throughput: idle.requestsPerSecond,
        p50Ms: idle.p50Ms,
        p99Ms: idle.p99Ms,
      }),
      row({
        scenario: SCENARIO,
        subject: `${engine}: sync calls while the purge deletes ${before.toLocaleString("en-US")} expired records`,
        throughput: during.requestsPerSecond,
        p50Ms: during.p50Ms,
        p99Ms: during.p99Ms,
        ratio,
        target: "p99 < 2× idle",
        met: ratio < 2 && during.non2xx === 0,
        note: left
          ? `purged ${Math.round(purged / seconds).toLocaleString("en-US")} records/s (${
            purged.toLocaleString("en-US")
          } in ${seconds.toFixed(0)} s; a million takes ~${Math.round(1_000_000 / (purged / seconds) / 60)} min)`
          : `all ${purged.toLocaleString("en-US")} purged within the ${seconds.toFixed(0)} s measured`,
      }),
    );
    return rows;
  } finally {
    await server.stop();
    await rm(dataDir, { recursive: true, force: true });
    await database?.drop();
  }
}

/**
 * 11. Run records: with 10k, 100k and 1M runs in the store, getRun and listRuns (one app, a status
 * filter, a deep cursor) p50/p99 and store bytes per run; then the retention purge of all of them while
 * sync calls run. SQLite, and PostgreSQL when one answers.
 */
export async function runRecordsScenario(context: BenchContext): Promise<BenchRow[]> {
  const rows = await onEngine(context, "sqlite");
  const unavailable = await postgresUnavailable();
  if (unavailable) return [...rows, row({ scenario: SCENARIO, subject: "postgres", note: unavailable })];
  return [...rows, ...await onEngine(context, "postgres")];
}
