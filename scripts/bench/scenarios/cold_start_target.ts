/**
 * Part of 10. Cold start: the measure of Runplane's own part of a new app's first call, from the
 * request to the result through the server (its template, then a fork: the default), minus `python3 -c
 * pass` and main.py's import, all four in the same alternating rounds: a new app with egress (the
 * default) and one without (`[network] egress = false`), each app called once.
 */
import { execFile } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { type BenchContext, row } from "../_context.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer } from "../_runplane.ts";

const SCENARIO = "10. Cold start";
const ROUNDS = 11;
const TARGET_MS = { egress: 60, noEgress: 40 };
const MAIN = `def hello(name="world"):\n    return {"hello": name}\n`;
const run = promisify(execFile);

/**
 * The arguments that import `mainPy` as a replica does: a plain import, compiled (`-B`: no bytecode is
 * written, as in a read-only app folder). `runpy.run_path` would add its own imports (~10 ms here).
 */
export function importMainArgs(mainPy: string): string[] {
  return ["-B", "-c", `import sys; sys.path.insert(0, ${JSON.stringify(dirname(mainPy))}); import main`];
}

/** The app of `round` with or without egress. */
function appName(round: number, egress: boolean): string {
  return `${egress ? "ne" : "nn"}-${String(round).padStart(2, "0")}`;
}

/** Writes the rounds' apps (before the server starts: it reads its apps folder then). */
export async function writeTargetApps(appsDir: string): Promise<void> {
  for (let round = 0; round < ROUNDS; round++) {
    for (const egress of [true, false]) {
      const name = appName(round, egress);
      const dir = join(appsDir, BENCH_PROJECT, name);
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "main.py"), MAIN);
      await writeFile(
        join(dir, "runplane.toml"),
        `[deployment]\nname = "${name}"\nruntime = "python"\n\n[scaling]\nmin_replicas = 0\nmax_replicas = 1\n`
          + (egress ? "" : "\n[network]\negress = false\n"),
      );
    }
  }
}

async function timed(task: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await task();
  return performance.now() - started;
}

async function firstCall(server: BenchServer, app: string): Promise<void> {
  const response = await fetch(`${server.url}/v4/${BENCH_PROJECT}/${app}/hello`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: "{}",
  });
  await response.arrayBuffer();
  if (!response.ok) throw new Error(`${app}/hello answered ${response.status}`);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** The rows: Runplane's part with egress and without, each against its target. */
export async function targetRows(
  context: BenchContext,
  options: { server: BenchServer; interpreter: string; mainPy: string },
): Promise<BenchRow[]> {
  const { server, interpreter, mainPy } = options;
  context.log(`${SCENARIO}: Runplane's part of a new app's first call, ${ROUNDS} alternating rounds`);
  const times = { floor: [] as number[], imported: [] as number[], egress: [] as number[], noEgress: [] as number[] };
  const importMain = importMainArgs(mainPy);
  for (let round = 0; round < ROUNDS; round++) {
    times.floor.push(await timed(() => run(interpreter, ["-c", "pass"])));
    times.imported.push(await timed(() => run(interpreter, importMain)));
    const egressFirst = round % 2 === 0;
    for (const egress of egressFirst ? [true, false] : [false, true]) {
      const ms = await timed(() => firstCall(server, appName(round, egress)));
      (egress ? times.egress : times.noEgress).push(ms);
    }
  }
  const floor = median(times.floor);
  const importMs = Math.max(0, median(times.imported) - floor);
  const part = (ms: number[]) => median(ms) - floor - importMs;
  const rowOf = (what: string, ms: number[], target: number) =>
    row({
      scenario: SCENARIO,
      subject: `Runplane's part of a new app's first call through the server, ${what}`,
      p50Ms: part(ms),
      target: `≤ ${target} ms`,
      met: part(ms) <= target,
      note: `first call ${median(ms).toFixed(1)} ms (template, then a fork) − python3 -c pass ${floor.toFixed(1)} ms − `
        + `main.py's import ${importMs.toFixed(1)} ms; medians of ${ROUNDS} alternating rounds, a new app each`,
    });
  return [
    rowOf("jailed with egress", times.egress, TARGET_MS.egress),
    rowOf("jailed without egress", times.noEgress, TARGET_MS.noEgress),
  ];
}
