import { type BenchContext, row } from "../_context.ts";
import { memoryOf } from "../_processes.ts";
import type { BenchRow } from "../_report.ts";

/** 7. Resident memory of an idle server, right after start (before any load). */
export async function idleRssScenario(context: BenchContext): Promise<BenchRow[]> {
  const scenario = "7. Idle server RSS";
  await new Promise((r) => setTimeout(r, 3000));
  const ours = await memoryOf(context.runplane.child.pid!);
  const koa = await memoryOf(context.bareKoa.child.pid!);
  return [
    row({ scenario, subject: "bare Koa (baseline)", throughput: koa.rssMiB, unit: "MiB" }),
    row({
      scenario,
      subject: "runplane",
      throughput: ours.rssMiB,
      unit: "MiB",
      ratio: ours.rssMiB / koa.rssMiB,
      target: "< 120 MB",
      met: ours.rssMiB * 1.048576 < 120,
    }),
  ];
}
