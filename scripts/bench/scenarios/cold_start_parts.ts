/**
 * Part of 10. Cold start: what Runplane itself adds to the first cold start of a trivial Python app, part
 * by part, against `python3 -c pass` run by the same interpreter a replica runs: the worker harness (its
 * imports, main.py, `ready`), the first call over the worker protocol, the jail, the cgroup. Each part in
 * the same alternating rounds, so the host's drift hits all of them alike.
 */
import { spawn } from "node:child_process";
import { access, chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { createLogger } from "../../../server/log.ts";
import { BOOTSTRAP, currentHarness, prepareHarness, WORKER_PATH } from "../../../server/runtime/mod.ts";
import { createCgroups, createSandbox, unjailedSandbox } from "../../../server/sandbox/mod.ts";
import { type BenchContext, row } from "../_context.ts";
import type { BenchRow } from "../_report.ts";
import { coldStart, median } from "./sandbox_cost.ts";

const SCENARIO = "10. Cold start";
const ROUNDS = 11;
/** The PATH a jailed replica resolves `python3` on (the sandbox's base environment). */
const JAIL_PATH = ["/usr/local/bin", "/usr/bin", "/bin"];
const TRIVIAL_MAIN = "def hello():\n    return {}\n";

/** The interpreter a jailed replica of `python = "python3"` runs (PATH may name a shim the jail does not see). */
export async function replicaPython(): Promise<string> {
  for (const dir of JAIL_PATH) {
    const path = join(dir, "python3");
    if (await access(path).then(() => true, () => false)) return path;
  }
  return "python3";
}

/**
 * Milliseconds from spawning `python args` (clean environment) to its exit. The harness gets its two
 * protocol pipes: its requests (fd 3) end at once, so it loads main.py, says ready and exits.
 */
function processMs(python: string, args: string[], cwd: string): Promise<number> {
  const started = performance.now();
  const child = spawn(python, args, {
    cwd,
    env: { PATH: JAIL_PATH.join(":") },
    stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"],
  });
  (child.stdio[3] as Writable).end();
  (child.stdio[4] as Readable).resume();
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (code) => {
      if (code === 0) resolve(performance.now() - started);
      else reject(new Error(`${python} ${args.join(" ")} exited with code ${code}`));
    });
  });
}

interface Parts {
  floor: number[];
  harness: number[];
  script: number[];
  unjailed: number[];
  jailed: number[];
  cgroup: number[];
  egress: number[];
}

async function measureParts(context: BenchContext, python: string, appDir: string): Promise<Parts> {
  const logger = createLogger({ level: "silent" });
  const jail = await createSandbox("required", { logger });
  const cgroups = await createCgroups("auto", { logger, owner: "bench-parts", pids: 512 });
  const plain = unjailedSandbox();
  const parts: Parts = { floor: [], harness: [], script: [], unjailed: [], jailed: [], cgroup: [], egress: [] };
  // As a server does at its start: replicas then import the harness's bytecode, compiled once.
  await prepareHarness();
  const harness = currentHarness().file;
  const cgroupsOrNone = cgroups.status.version ? cgroups : undefined;
  try {
    for (let round = -1; round < ROUNDS; round++) {
      if (round % 5 === 0) context.log(`${SCENARIO}: Runplane's part, round ${round + 1} of ${ROUNDS}`);
      const sample = {
        floor: await processMs(python, ["-c", "pass"], appDir),
        // The harness loads main.py, says ready and exits at once: its fd 3 (requests) is /dev/null. As a
        // replica runs it (imported, its bytecode compiled once), and as a script (compiled at every start).
        harness: await processMs(python, ["-u", "-c", BOOTSTRAP, harness, appDir, "1"], appDir),
        script: await processMs(python, ["-u", WORKER_PATH, appDir, "1"], appDir),
        unjailed: await coldStart(plain, appDir, { python, egress: false }),
        jailed: await coldStart(jail, appDir, { python, egress: false }),
        cgroup: await coldStart(jail, appDir, { python, egress: false, cgroups: cgroupsOrNone }),
        egress: await coldStart(jail, appDir, { python, egress: true, cgroups: cgroupsOrNone }),
      };
      // Round -1 warms the page cache and is not counted.
      if (round < 0) continue;
      for (const key of Object.keys(sample) as Array<keyof Parts>) parts[key].push(sample[key]);
    }
  } finally {
    jail.close();
    plain.close();
    await cgroups.close();
  }
  return parts;
}

/** Rows for Runplane's own part of a trivial app's first cold start; `httpFirstCallMs` is the server's. */
export async function coldStartPartRows(
  context: BenchContext,
  options: { httpFirstCallMs: number },
): Promise<BenchRow[]> {
  const python = await replicaPython();
  const appDir = await mkdtemp(join(tmpdir(), "runplane-bench-parts-"));
  await chmod(appDir, 0o755);
  await writeFile(join(appDir, "main.py"), TRIVIAL_MAIN);
  let parts: Parts;
  try {
    parts = await measureParts(context, python, appDir);
  } finally {
    await rm(appDir, { recursive: true, force: true });
  }
  const floor = median(parts.floor);
  const m = (key: keyof Parts) => median(parts[key]);
  const over = (value: number, base: number, what: string) => `+${(value - base).toFixed(1)} ms over ${what}`;
  const subject = (what: string) => `Runplane's part: ${what}`;
  /** The row of one measured part: its median, its ratio to the floor, and what it adds over `base`. */
  const part = (key: keyof Parts, options: { what: string; base: number; baseName: string }) =>
    row({
      scenario: SCENARIO,
      subject: subject(options.what),
      p50Ms: m(key),
      ratio: m(key) / floor,
      target: "report",
      note: over(m(key), options.base, options.baseName),
    });
  return [
    row({
      scenario: SCENARIO,
      subject: subject(`${python} -c pass (the interpreter floor)`),
      p50Ms: floor,
      target: "report",
      note: `spawned by Node with a clean environment; medians of ${ROUNDS} alternating rounds`,
    }),
    part("harness", {
      what: "worker harness: imports, main.py, ready",
      base: floor,
      baseName: "the floor (what _worker.py imports before it says ready; its bytecode compiled once per server)",
    }),
    part("script", {
      what: "worker harness run as a script (compiled at every start)",
      base: m("harness"),
      baseName: "the harness's bytecode (what compiling _worker.py costs each start)",
    }),
    part("unjailed", {
      what: "cold replica to first call, unjailed",
      base: floor,
      baseName: "the floor (the harness, the handshake, the first call)",
    }),
    part("jailed", {
      what: "cold replica to first call, jailed",
      base: m("unjailed"),
      baseName: "unjailed (bubblewrap, seccomp, setpriv)",
    }),
    row({
      scenario: SCENARIO,
      subject: subject("cold replica to first call, jailed, in its cgroup"),
      p50Ms: m("cgroup"),
      ratio: m("cgroup") / floor,
      target: "report",
      note: `${over(m("cgroup"), m("jailed"), "jailed alone (cgroup made, joined, removed)")}; Runplane adds ${
        (m("cgroup") - floor).toFixed(1)
      } ms over ${python} -c pass`,
    }),
    row({
      scenario: SCENARIO,
      subject: subject("cold replica to first call, jailed with egress, in its cgroup"),
      p50Ms: m("egress"),
      ratio: m("egress") / floor,
      target: "report",
      note: `${over(m("egress"), m("cgroup"), "without egress (slirp4netns and its routes)")}; Runplane adds ${
        (m("egress") - floor).toFixed(1)
      } ms over ${python} -c pass`,
    }),
    row({
      scenario: SCENARIO,
      subject: subject("first call through the server (HTTP, template + fork)"),
      p50Ms: options.httpFirstCallMs,
      ratio: options.httpFirstCallMs / floor,
      target: "report",
      note: `Runplane adds ${(options.httpFirstCallMs - floor).toFixed(1)} ms over ${python} -c pass (${
        floor.toFixed(1)
      } ms, this run); the Python app first-call row's median`,
    }),
  ];
}
