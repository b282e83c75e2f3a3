import { type ChildProcess, spawn } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";

import { freePort } from "../../server/runtime/free_port.ts";

/** Resident and peak resident memory of a process, in MiB, from /proc. */
export async function memoryOf(pid: number): Promise<{ rssMiB: number; peakRssMiB: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0) / 1024;
  return { rssMiB: field("VmRSS"), peakRssMiB: field("VmHWM") };
}

/** The kernel's clock ticks per second (USER_HZ), the unit of /proc's CPU times: 100 on Linux. */
const CLOCK_TICKS_PER_SECOND = 100;

/** CPU seconds (user + system) `pids` have used so far (processes gone meanwhile count 0). */
export async function cpuSeconds(pids: number[]): Promise<number> {
  let ticks = 0;
  for (const pid of pids) {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
    // utime and stime are the 12th and 13th fields after the command's closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    ticks += Number(fields[11] ?? 0) + Number(fields[12] ?? 0);
  }
  return ticks / CLOCK_TICKS_PER_SECOND;
}

/** The pids of `pid`'s descendants (children, their children, …), from /proc. */
export async function descendantsOf(pid: number): Promise<number[]> {
  const parents = new Map<number, number>();
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    // The fields after the command (which may hold spaces) start after its closing parenthesis.
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
    if (ppid) parents.set(Number(entry), ppid);
  }
  const found: number[] = [];
  let frontier = [pid];
  while (frontier.length) {
    frontier = [...parents].filter(([, parent]) => frontier.includes(parent)).map(([child]) => child);
    found.push(...frontier);
  }
  return found;
}

/** The resident memory of `pid`'s descendants together, in MiB (processes gone meanwhile count 0). */
export async function descendantsRssMiB(pid: number): Promise<number> {
  let total = 0;
  for (const child of await descendantsOf(pid)) total += await memoryOf(child).then((m) => m.rssMiB, () => 0);
  return total;
}

/** Polls `url` until it answers (any status), or throws after `timeoutMs`. */
export async function waitForHttp(url: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await fetch(url);
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`${url} did not answer within ${timeoutMs} ms`, { cause: error });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** A child process started for the benchmark, stopped by `stop()`. */
export interface BenchProcess {
  child: ChildProcess;
  url: string;
  output(): string;
  stop(): Promise<void>;
}

/**
 * Starts `command` with `PORT` set to `port` (default: a free port) and waits until `readyPath` answers.
 * A process that must know its own address before it starts (an advertised URL) is given its port.
 */
export async function startProcess(
  command: string,
  options: { args: string[]; env?: Record<string, string>; readyPath?: string; cwd?: string; port?: number },
): Promise<BenchProcess> {
  const port = options.port ?? await freePort();
  const child = spawn(command, options.args, {
    cwd: options.cwd,
    env: { ...process.env, ...options.env, PORT: String(port) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk) => (output = (output + chunk).slice(-20_000)));
  child.stderr!.on("data", (chunk) => (output = (output + chunk).slice(-20_000)));
  const url = `http://127.0.0.1:${port}`;
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code) => reject(new Error(`${command} exited with ${code} before it was ready:\n${output}`)))
  );
  await Promise.race([waitForHttp(url + (options.readyPath ?? "/")), exited]);
  return {
    child,
    url,
    output: () => output,
    stop() {
      return new Promise((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 10_000).unref();
      });
    },
  };
}
