/**
 * What a replica's cgroup costs on its cold start: a jailed Python replica (process, worker, handshake,
 * first call) with and without a cgroup of its own (made with its limits, joined by the starting shell,
 * removed after), its join primed as a server's are (`CgroupMovePrimer`) and not, in alternating rounds so
 * the host's drift hits all of them; a replica forked from a kept template into its own cgroup, primed
 * and not; and making plus removing the cgroup alone. Skipped, with a row that says why, where cgroups
 * cannot be written.
 */
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createLogger } from "../../../server/log.ts";
import { PythonReplica, ReplicaTemplate } from "../../../server/runtime/mod.ts";
import { type Cgroups, createCgroups, createSandbox, type Sandbox } from "../../../server/sandbox/mod.ts";
import { BENCH_PROJECT } from "../_runplane.ts";
import { type BenchContext, row } from "../_context.ts";
import type { BenchRow } from "../_report.ts";
import { coldStart, median, untilFirstCall } from "./sandbox_cost.ts";

const SCENARIO = "15. Cgroups";
const ROUNDS = 15;
const LIMITS = { cpu: 1, memoryBytes: 512 * 1024 ** 2 };

/** A replica forked from `template` into a cgroup of its own from `cgroups`: ms to its first call answered. */
async function forkStart(template: ReplicaTemplate, cgroups: Cgroups): Promise<number> {
  const started = performance.now();
  const cgroup = cgroups.create("p-bench/fork", LIMITS)!;
  const replica = new PythonReplica({
    label: "p-bench/fork",
    logger: createLogger({ level: "silent" }),
    cgroup,
    start: () => template.fork({ cgroup }),
  });
  const elapsed = await untilFirstCall(replica, started);
  await cgroup.remove();
  return elapsed;
}

/** Each variant's times, in alternating rounds. */
interface Times {
  without: number[];
  with: number[];
  unprimed: number[];
  forked: number[];
  forkedUnprimed: number[];
  alone: number[];
}

async function measure(
  context: BenchContext,
  options: { sandbox: Sandbox; cgroups: Cgroups; unprimed: Cgroups; appDir: string },
): Promise<Times> {
  const { sandbox, cgroups, unprimed, appDir } = options;
  const times: Times = { without: [], with: [], unprimed: [], forked: [], forkedUnprimed: [], alone: [] };
  const template = new ReplicaTemplate({
    appDir,
    label: "p-bench/template",
    python: "/usr/bin/python3",
    concurrency: 1,
    preload: [],
    logger: createLogger({ level: "silent" }),
    sandbox,
    jail: { projectId: BENCH_PROJECT, cwd: appDir, readOnly: [appDir], egress: false, env: {} },
  });
  try {
    // Round -1 warms the page cache and the template and is not counted.
    for (let round = -1; round < ROUNDS; round++) {
      if (round % 5 === 0) context.log(`cgroups: cold starts, round ${round + 1} of ${ROUNDS}`);
      const sample = {
        without: await afterPause(() => coldStart(sandbox, appDir, { egress: false })),
        with: await afterPause(() => coldStart(sandbox, appDir, { egress: false, cgroups })),
        unprimed: await afterPause(() => coldStart(sandbox, appDir, { egress: false, cgroups: unprimed })),
        forked: await afterPause(() => forkStart(template, cgroups)),
        forkedUnprimed: await afterPause(() => forkStart(template, unprimed)),
        alone: await afterPause(() => timed(() => cgroups.create("p-bench/alone", LIMITS)!.remove())),
      };
      if (round < 0) continue;
      for (const key of Object.keys(sample) as Array<keyof Times>) times[key].push(sample[key]);
    }
  } finally {
    await template.close();
  }
  return times;
}

/**
 * Runs `task` after 300 ms of nothing: a move into a cgroup is cheap for one grace period after another
 * move (the previous variant's), and a cold start on a host not busy starting replicas finds none.
 */
async function afterPause<T>(task: () => Promise<T>): Promise<T> {
  await new Promise((resolve) => setTimeout(resolve, 300));
  return await task();
}

async function timed(task: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await task();
  return performance.now() - started;
}

/** The cgroups' cost on a replica's cold start (cold and forked), and making and removing one alone. */
export async function cgroupCostScenario(context: BenchContext): Promise<BenchRow[]> {
  const logger = createLogger({ level: "silent" });
  const cgroups = await createCgroups("auto", { logger, owner: "rp_bench", pids: 512 });
  if (!cgroups.status.version) {
    return [row({ scenario: SCENARIO, subject: "skipped", note: cgroups.status.problems.join("; ") })];
  }
  const unprimed = await createCgroups("auto", { logger, owner: "rp_bench_unprimed", pids: 512, primeMoves: false });
  const sandbox = await createSandbox("auto", { logger });
  const appDir = await mkdtemp(join(tmpdir(), "runplane-bench-cgroups-"));
  await chmod(appDir, 0o755);
  await writeFile(join(appDir, "main.py"), "def hello():\n    return {'hello': 'world'}\n");
  let times: Times;
  try {
    times = await measure(context, { sandbox, cgroups, unprimed, appDir });
  } finally {
    sandbox.close();
    await cgroups.close();
    await unprimed.close();
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
      note: `made, joined by the starting shell (primed), removed: +${(median(times.with) - base).toFixed(1)} ms over ${
        base.toFixed(1)
      } ms, medians of ${ROUNDS}`,
    }),
    row({
      scenario: SCENARIO,
      subject: `cold start, ${jailed}, own cgroup ${cgroups.status.version}, its join not primed`,
      unit: "ms",
      p50Ms: median(times.unprimed),
      p99Ms: Math.max(...times.unprimed),
      ratio: median(times.unprimed) / base,
      note: `as before the primer: +${
        (median(times.unprimed) - base).toFixed(1)
      } ms over no cgroup; the primed join saves ${(median(times.unprimed) - median(times.with)).toFixed(1)} ms`,
    }),
    row({
      scenario: SCENARIO,
      subject: `a replica forked from a kept template into its own cgroup ${cgroups.status.version}`,
      unit: "ms",
      p50Ms: median(times.forked),
      p99Ms: Math.max(...times.forked),
      note: `fork requested to first call answered, its move primed at the fork request; not primed: ${
        median(times.forkedUnprimed).toFixed(1)
      } ms (p99 ${Math.max(...times.forkedUnprimed).toFixed(1)}), so priming saves ${
        (median(times.forkedUnprimed) - median(times.forked)).toFixed(1)
      } ms`,
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
