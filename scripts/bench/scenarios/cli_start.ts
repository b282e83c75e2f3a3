/**
 * 23. CLI start (issue 51): what one `runplane` command costs a person at a terminal, from a checkout (the
 * bin runs the CLI compiled into node_modules/.cache/runplane-cli/, scripts/build_cli.mjs), against the
 * floor of any Node program, `node -e 0`: `runplane --help` (no command loaded), a real command
 * (`runplane apps list` against the bench server: its client, one REST call, a table) and the same command
 * through tsx (RUNPLANE_CLI_SOURCES=1, how every command ran before). Rounds interleave the four, so load
 * on the machine falls on each alike; wall time per process, median and p99. Targets: `--help` ≤ 150 ms,
 * a command ≤ 250 ms (wall, not above the floor). Run alone: `npx tsx scripts/bench/scenarios/cli_start.ts`.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { ROOT } from "../../_root.ts";
import { type BenchContext, row } from "../_context.ts";
import { machineInfo } from "../_machine.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, startRunplane } from "../_runplane.ts";

const SCENARIO = "23. CLI start";
const ROUNDS = Number(process.env.BENCH_CLI_ROUNDS ?? 30);
const BIN = join(ROOT, "client", "runplane.mjs");

const run = promisify(execFile);

/** GNU time, for the CPU a process used (user + system), which a loaded machine does not inflate as it does wall time. */
const GNU_TIME = existsSync("/usr/bin/time") ? "/usr/bin/time" : null;

/** Wall and CPU milliseconds of one process `node ...args`, which must exit 0 (CPU NaN without GNU time). */
async function timed(args: string[], env: Record<string, string>): Promise<{ wall: number; cpu: number }> {
  const started = performance.now();
  const options = { env: { ...process.env, ...env }, cwd: ROOT };
  if (!GNU_TIME) {
    await run(process.execPath, args, options);
    return { wall: performance.now() - started, cpu: Number.NaN };
  }
  const { stderr } = await run(GNU_TIME, ["-f", "cpu %U %S", process.execPath, ...args], options);
  const wall = performance.now() - started;
  const [, user, system] = /cpu (\S+) (\S+)\s*$/.exec(stderr) ?? [];
  return { wall, cpu: (Number(user) + Number(system)) * 1000 };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** The scenario's rows, against the bench server at `url` with `token` (project p-bench). */
export async function cliStartRows(url: string, token: string): Promise<BenchRow[]> {
  const env = { RUNPLANE_BASE_URL: url, RUNPLANE_TOKEN: token };
  const subjects: Array<{ subject: string; args: string[]; env: Record<string, string>; targetMs?: number }> = [
    { subject: "node -e 0 (the floor)", args: ["-e", "0"], env: {} },
    { subject: "runplane --help", args: [BIN, "--help"], env, targetMs: 150 },
    { subject: "runplane apps list (one REST call)", args: [BIN, "apps", "list", BENCH_PROJECT], env, targetMs: 250 },
    {
      subject: "runplane apps list through tsx (before)",
      args: [BIN, "apps", "list", BENCH_PROJECT],
      env: { ...env, RUNPLANE_CLI_SOURCES: "1" },
    },
  ];
  // One warm-up round: the compiled CLI is built if the sources changed, the page cache is warm.
  for (const s of subjects) await timed(s.args, s.env);
  const samples = subjects.map(() => [] as number[]);
  const cpu = subjects.map(() => [] as number[]);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [index, s] of subjects.entries()) {
      const took = await timed(s.args, s.env);
      samples[index].push(took.wall);
      cpu[index].push(took.cpu);
    }
  }
  const floor = percentile(samples[0], 50);
  const cpuFloor = percentile(cpu[0], 50);
  return subjects.map((s, index) => {
    const p50 = percentile(samples[index], 50);
    const cpuP50 = percentile(cpu[index], 50);
    const cpuNote = Number.isNaN(cpuP50)
      ? ""
      : `; CPU ${Math.round(cpuP50)} ms (${Math.round(cpuP50 - cpuFloor)} above)`;
    return row({
      scenario: SCENARIO,
      subject: s.subject,
      throughput: null,
      unit: "",
      p50Ms: p50,
      p99Ms: percentile(samples[index], 99),
      target: s.targetMs ? `≤ ${s.targetMs} ms` : "",
      met: s.targetMs ? p50 <= s.targetMs : null,
      note: index === 0
        ? `${ROUNDS} rounds, interleaved${cpuNote}`
        : `${Math.round(p50 - floor)} ms above the floor${cpuNote}`,
    });
  });
}

/** The scenario as `npm run bench -- --scenario cli` runs it. */
export async function cliStartScenario(context: BenchContext): Promise<BenchRow[]> {
  return await cliStartRows(context.runplane.url, context.runplane.token);
}

if (process.argv[1]?.endsWith("cli_start.ts")) {
  const server = await startRunplane();
  try {
    const rows = await cliStartRows(server.url, server.token);
    const report = { date: new Date().toISOString(), machine: machineInfo(), rows };
    await writeFile(join(ROOT, "scripts", "bench", "cli_results.json"), `${JSON.stringify(report, null, 2)}\n`);
    for (const r of rows) {
      process.stdout.write(
        `${r.subject.padEnd(42)} p50 ${r.p50Ms!.toFixed(0).padStart(5)} ms  p99 ${
          r.p99Ms!.toFixed(0).padStart(5)
        } ms  ${r.target} ${r.met === null ? "" : r.met ? "met" : "NOT MET"}  ${r.note}\n`,
      );
    }
  } finally {
    await server.stop();
  }
}
