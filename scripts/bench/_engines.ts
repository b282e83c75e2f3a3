import { type BenchContext, row } from "./_context.ts";
import { postgresUnavailable } from "./_postgres.ts";
import { memoryOf } from "./_processes.ts";
import type { BenchRow } from "./_report.ts";
import { type BenchServer, startRunplaneOnPostgres } from "./_runplane.ts";

/** One measured round against one server. */
export interface RoundResult {
  /** Throughput in the row's unit. */
  rate: number;
  p50Ms?: number;
  p99Ms?: number;
  /** Calls that were not answered 2xx (or deliveries that did not arrive). */
  failures?: number;
}

/** What `postgresVersusSqlite` compares. */
export interface EngineComparison {
  scenario: string;
  unit?: string;
  target: string;
  /** Whether the PostgreSQL figures meet the target, given their ratio to SQLite's (none: report only). */
  met?(postgres: RoundResult, ratio: number): boolean;
  /** Makes the fresh PostgreSQL server's hot path warm before the measured rounds. */
  warmUp(server: BenchServer): Promise<unknown>;
  /** One measured round. */
  measure(server: BenchServer): Promise<RoundResult>;
  /** Alternating rounds per engine (default 2). */
  rounds?: number;
}

function combined(results: RoundResult[]): Required<RoundResult> {
  const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;
  return {
    rate: mean(results.map((r) => r.rate)),
    p50Ms: mean(results.map((r) => r.p50Ms ?? Number.NaN)),
    p99Ms: Math.max(...results.map((r) => r.p99Ms ?? Number.NaN)),
    failures: results.reduce((sum, r) => sum + (r.failures ?? 0), 0),
  };
}

/**
 * The same load on a second server whose store is a fresh PostgreSQL database (dropped after) and on the
 * benchmark's SQLite server, in alternating rounds so the host's drift hits both; the row's ratio is
 * PostgreSQL's throughput over SQLite's in those rounds. Without a PostgreSQL server the row says so.
 */
export async function postgresVersusSqlite(context: BenchContext, options: EngineComparison): Promise<BenchRow> {
  const subject = "runplane on PostgreSQL vs SQLite";
  const unavailable = await postgresUnavailable();
  if (unavailable) return row({ scenario: options.scenario, subject, target: options.target, note: unavailable });
  // Configured as mod.ts configures the SQLite server.
  const server = await startRunplaneOnPostgres({ RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" });
  try {
    context.log(`${options.scenario}: PostgreSQL server, warming up`);
    await options.warmUp(server);
    const onPostgres: RoundResult[] = [];
    const onSqlite: RoundResult[] = [];
    const rounds = options.rounds ?? 2;
    for (let round = 0; round < rounds; round++) {
      context.log(`${options.scenario}: PostgreSQL vs SQLite, round ${round + 1} of ${rounds}`);
      onPostgres.push(await options.measure(server));
      onSqlite.push(await options.measure(context.runplane));
    }
    const postgres = combined(onPostgres);
    const sqlite = combined(onSqlite);
    const ratio = postgres.rate / sqlite.rate;
    const unit = options.unit ?? "req/s";
    return row({
      scenario: options.scenario,
      subject,
      throughput: postgres.rate,
      unit,
      p50Ms: Number.isNaN(postgres.p50Ms) ? null : postgres.p50Ms,
      p99Ms: Number.isNaN(postgres.p99Ms) ? null : postgres.p99Ms,
      peakRssMiB: (await memoryOf(server.child.pid!)).peakRssMiB,
      ratio,
      target: options.target,
      met: options.met ? options.met(postgres, ratio) && postgres.failures === 0 : null,
      note: `SQLite: ${Math.round(sqlite.rate)} ${unit}${
        Number.isNaN(sqlite.p99Ms) ? "" : `, p99 ${sqlite.p99Ms} ms`
      } in the same alternating rounds; one process, pool of 10${
        postgres.failures ? `; ${postgres.failures} failed on PostgreSQL` : ""
      }`,
    });
  } finally {
    await server.stop();
  }
}
