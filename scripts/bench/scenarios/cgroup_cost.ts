/**
 * What a replica's cgroup costs on its cold start: a jailed Python replica (process, worker, handshake,
 * first call) with and without a cgroup of its own (made with its limits, joined by the starting shell,
 * removed after), in alternating rounds so the host's drift hits both; and making plus removing the
 * cgroup alone. Skipped, with a row that says why, where cgroups cannot be written.
 */
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "../../../server/log.ts";
import { createCgroups, createSandbox } from "../../../server/sandbox/mod.ts";
import { type BenchContext, row } from "../_context.ts";
import type { BenchRow } from "../_report.ts";
import { coldStart, median } from "./sandbox_cost.ts";

const SCENARIO = "15. Cgroups";
const ROUNDS = 15;
const LIMITS = { cpu: 1, memoryBytes: 512 * 1024 ** 2 };

/** The cgroups' cost on a replica's cold start, and making and removing one alone. */
export async function cgroupCostScenario(context: BenchContext): Promise<BenchRow[]> {
  const logger = createLogger({ level: "silent" });
  const cgroups = await createCgroups("auto", { logger, owner: "rp_bench", pids: 512 });
  if (!cgroups.status.version) {
    return [row({ scenario: SCENARIO, subject: "skipped", note: cgroups.status.problems.join("; ") })];
  }
  const sandbox = await createSandbox("auto", { logger });
  const appDir = await mkdtemp(join(tmpdir(), "runplane-bench-cgroups-"));
  await chmod(appDir, 0o755);
  await writeFile(join(appDir, "main.py"), "def hello():\n    return {'hello': 'world'}\n");
  const times = { without: [] as number[], with: [] as number[], alone: [] as number[] };
  try {
    await coldStart(sandbox, appDir, { egress: false });
    await coldStart(sandbox, appDir, { egress: false, cgroups });
    for (let round = 0; round < ROUNDS; round++) {
      if (round % 5 === 0) context.log(`cgroups: cold starts, round ${round + 1} of ${ROUNDS}`);
      times.without.push(await coldStart(sandbox, appDir, { egress: false }));
      times.with.push(await coldStart(sandbox, appDir, { egress: false, cgroups }));
      const started = performance.now();
      await cgroups.create("p-bench/alone", LIMITS)!.remove();
      times.alone.push(performance.now() - started);
    }
  } finally {
    sandbox.close();
    await cgroups.close();
    await rm(appDir, { recursive: true, force: true });
  }
  const base = median(times.without);
  const jailed = sandbox.status.jailed ? "jailed" : "unjailed";
  return [
    row({
      scenario: SCENARIO,
      subject: `cold start, ${jailed}, no cgroup`,
      unit: "ms",
      p50Ms: base,
      p99Ms: Math.max(...times.without),
    }),
    row({
      scenario: SCENARIO,
      subject: `cold start, ${jailed}, own cgroup ${cgroups.status.version}`,
      unit: "ms",
      p50Ms: median(times.with),
      p99Ms: Math.max(...times.with),
      ratio: median(times.with) / base,
      target: "cold start ≤ +5 ms",
      met: median(times.with) - base <= 5,
      note: `made, joined by the starting shell, removed: +${(median(times.with) - base).toFixed(1)} ms over ${
        base.toFixed(1)
      } ms, medians of ${ROUNDS}`,
    }),
    row({
      scenario: SCENARIO,
      subject: `make and remove a cgroup ${cgroups.status.version} alone`,
      unit: "ms",
      p50Ms: median(times.alone),
      p99Ms: Math.max(...times.alone),
      note: "mkdir and the limit files in each hierarchy, then rmdir",
    }),
  ];
}
