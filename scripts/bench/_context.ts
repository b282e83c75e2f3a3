import type { BenchRow } from "./_report.ts";
import type { BenchServer } from "./_runplane.ts";
import type { BenchProcess } from "./_processes.ts";

/** What every scenario gets. */
export interface BenchContext {
  runplane: BenchServer;
  bareKoa: BenchProcess;
  /** Seconds per load run. */
  durationSeconds: number;
  log(message: string): void;
}

/** A scenario: measures and returns its rows (the baseline row first). */
export type Scenario = (context: BenchContext) => Promise<BenchRow[]>;

/** A row with the fields a scenario does not set filled with their neutral values. */
export function row(fields: Partial<BenchRow> & Pick<BenchRow, "scenario" | "subject">): BenchRow {
  return {
    throughput: null,
    unit: "req/s",
    p50Ms: null,
    p99Ms: null,
    peakRssMiB: null,
    ratio: null,
    target: "",
    met: null,
    note: "",
    ...fields,
  };
}
