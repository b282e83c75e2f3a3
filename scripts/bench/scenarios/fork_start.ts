/**
 * Part of 10. Cold start: an app whose import burns ~1.5 s of CPU, with replicas forked from its template
 * and without (RUNPLANE_FORK_REPLICAS=false): the first cold start, a second replica started while the
 * first is busy, and a scale from zero once the replicas cooled down (the template kept).
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type BenchContext, row } from "../_context.ts";
import type { BenchRow } from "../_report.ts";
import { BENCH_PROJECT, type BenchServer, startRunplane } from "../_runplane.ts";

const SCENARIO = "10. Cold start";
const IMPORT_CPU_S = 1.5;
const COOLDOWN_S = 2;

const HEAVY_MAIN = `import os, time

IMPORT_PID = os.getpid()
_end = time.process_time() + ${IMPORT_CPU_S}
while time.process_time() < _end:
    pass

def whoami(pause=0):
    time.sleep(pause)
    return {"forked": os.getpid() != IMPORT_PID}
`;

async function call(server: BenchServer, body: Record<string, unknown>): Promise<{ ms: number; forked: boolean }> {
  const started = performance.now();
  const response = await fetch(`${server.url}/v4/${BENCH_PROJECT}/heavy/whoami`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json() as { result: { forked: boolean } };
  if (!response.ok) throw new Error(`heavy/whoami answered ${response.status}`);
  return { ms: performance.now() - started - Number(body.pause ?? 0) * 1000, forked: answer.result.forked };
}

interface Starts {
  first: number;
  second: number;
  fromZero: number;
  forked: boolean;
}

/** The three starts on one server. */
async function measure(fork: boolean, appsDir: string): Promise<Starts> {
  const server = await startRunplane({ RUNPLANE_FORK_REPLICAS: String(fork) }, { appsDir });
  try {
    const first = await call(server, {});
    // The first replica is warm; this call holds its only slot, so the next one needs a second replica.
    const busy = call(server, { pause: 3 });
    await sleep(300);
    const second = await call(server, {});
    await busy;
    // Replicas stop after the cooldown; the template stays one cooldown more.
    await sleep((COOLDOWN_S + 1.5) * 1000);
    const fromZero = await call(server, {});
    return { first: first.ms, second: second.ms, fromZero: fromZero.ms, forked: second.forked && fromZero.forked };
  } finally {
    await server.stop();
  }
}

/** Rows for the expensive-import app, forked and not. */
export async function forkStartRows(context: BenchContext): Promise<BenchRow[]> {
  const appsDir = await mkdtemp(join(tmpdir(), "runplane-bench-fork-"));
  try {
    const dir = join(appsDir, BENCH_PROJECT, "heavy");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "main.py"), HEAVY_MAIN);
    await writeFile(join(dir, "runplane.toml"), `[scaling]\nmax_replicas = 2\ncooldown = ${COOLDOWN_S}\n`);
    context.log(`${SCENARIO}: an app whose import burns ${IMPORT_CPU_S} s of CPU, replicas forked`);
    const forked = await measure(true, appsDir);
    context.log(`${SCENARIO}: the same app, RUNPLANE_FORK_REPLICAS=false`);
    const cold = await measure(false, appsDir);
    const subject = (what: string) => `${IMPORT_CPU_S} s import: ${what}`;
    return [
      row({
        scenario: SCENARIO,
        subject: subject("first cold start (template import + fork)"),
        p50Ms: forked.first,
        target: "report",
        note: `without forks: ${cold.first.toFixed(0)} ms`,
      }),
      row({
        scenario: SCENARIO,
        subject: subject("second replica while the first is busy"),
        p50Ms: forked.second,
        ratio: forked.second / forked.first,
        target: "≤ 0.35× the first cold start",
        met: forked.forked && forked.second <= 0.35 * forked.first,
        note: `without forks: ${cold.second.toFixed(0)} ms (${(cold.second / cold.first).toFixed(2)}×)`,
      }),
      row({
        scenario: SCENARIO,
        subject: subject("scale from zero, template kept"),
        p50Ms: forked.fromZero,
        ratio: forked.fromZero / forked.first,
        target: "report",
        note: `without forks: ${cold.fromZero.toFixed(0)} ms`,
      }),
    ];
  } finally {
    await rm(appsDir, { recursive: true, force: true });
  }
}
