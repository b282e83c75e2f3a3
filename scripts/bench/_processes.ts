import { type ChildProcess, spawn } from "node:child_process";
import { readFile } from "node:fs/promises";

import { freePort } from "../../server/runtime/free_port.ts";

/** Resident and peak resident memory of a process, in MiB, from /proc. */
export async function memoryOf(pid: number): Promise<{ rssMiB: number; peakRssMiB: number }> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0) / 1024;
  return { rssMiB: field("VmRSS"), peakRssMiB: field("VmHWM") };
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

/** Starts `command` with `PORT` set to a free port and waits until `readyPath` answers. */
export async function startProcess(
  command: string,
  options: { args: string[]; env?: Record<string, string>; readyPath?: string; cwd?: string },
): Promise<BenchProcess> {
  const port = await freePort();
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
