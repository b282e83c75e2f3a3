/** Runs the `runplane` executable as a subprocess, the way a user does. */
import { execFile, spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { join } from "node:path";

/** The package's `bin`. */
export const CLI = join(import.meta.dirname, "..", "..", "client", "runplane.mjs");

/** What a finished CLI process left behind. */
export interface CliOutcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `runplane ...args` to completion with `env` over a clean environment (no inherited RUNPLANE_*). */
export function runCli(
  args: string[],
  options: { env?: Record<string, string>; cwd?: string } = {},
): Promise<CliOutcome> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNPLANE_")));
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, ...args],
      { env: { ...env, ...options.env }, cwd: options.cwd, timeout: 60_000 },
      (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr });
      },
    );
  });
}

/** Starts `runplane ...args` and leaves it running (for `webhook listen`, `serve`). */
export function spawnCli(
  args: string[],
  options: { env?: Record<string, string> } = {},
): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, [CLI, ...args], { env: { ...process.env, ...options.env } });
}
