/**
 * Runs the `runplane` CLI: as a subprocess, the way a user does (`runCli`, `spawnCli`), or in this process
 * through `main(argv, io)` (`runMain`), which skips a process start per call.
 */
import { execFile, execFileSync, spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { join } from "node:path";
import { Writable } from "node:stream";
import { main } from "../../server/cli/mod.ts";

/** The package's `bin`. */
export const CLI = join(import.meta.dirname, "..", "..", "client", "runplane.mjs");

/** What a finished CLI process left behind. */
export interface CliOutcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * How long `runCli` lets the CLI run before it kills it: a guard against a hung CLI, not a bound on how
 * long a command may take (CI's first deploy, a virtualenv made on a loaded machine, once took past 60 s).
 */
const CLI_KILL_MS = 180_000;

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
      { env: { ...env, ...options.env }, cwd: options.cwd, timeout: CLI_KILL_MS },
      (error, stdout, stderr) => {
        const killed = error?.killed ? `\n[the test killed the CLI after ${CLI_KILL_MS / 1000} s]\n` : "";
        resolve({
          code: error ? (typeof error.code === "number" ? error.code : null) : 0,
          stdout,
          stderr: stderr + killed,
        });
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

/** A writable stream that keeps what it is given; `isTTY` makes it look like a terminal. */
export class CapturedOutput extends Writable {
  text = "";
  isTTY?: boolean;
  constructor(options: { isTTY?: boolean } = {}) {
    super({ decodeStrings: false });
    if (options.isTTY) this.isTTY = true;
  }
  override _write(chunk: string | Buffer, _encoding: string, done: () => void): void {
    this.text += String(chunk);
    this.emit("text", String(chunk));
    done();
  }
}

/**
 * Runs `runplane ...args` in this process through `main(argv, io)` (no process start-up), with `env` over
 * the same clean environment `runCli` gives; `cwd` is entered for the call and left after it.
 */
export async function runMain(
  args: string[],
  options: {
    env?: Record<string, string>;
    cwd?: string;
    stdin?: NodeJS.ReadableStream;
    signal?: AbortSignal;
    stdout?: CapturedOutput;
    stderr?: CapturedOutput;
  } = {},
): Promise<CliOutcome> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNPLANE_")));
  const stdout = options.stdout ?? new CapturedOutput();
  const stderr = options.stderr ?? new CapturedOutput();
  const previous = process.cwd();
  if (options.cwd) process.chdir(options.cwd);
  try {
    const code = await main(args, {
      stdout,
      stderr,
      env: { ...env, ...options.env },
      stdin: options.stdin,
      signal: options.signal,
    });
    return { code, stdout: stdout.text, stderr: stderr.text };
  } finally {
    process.chdir(previous);
  }
}

/** Whether util-linux `script` is here, to run the CLI on a pseudo-terminal (`runCliOnTerminal`). */
export const HAS_SCRIPT = (() => {
  try {
    execFileSync("script", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
})();

/**
 * Runs `runplane ...args` on a pseudo-terminal (util-linux `script`), as a person at a terminal does;
 * stdout and stderr arrive merged, as the terminal shows them. With `answer`, types `answer.typed` once
 * the output matches `answer.waitFor` (a prompt), and never before.
 */
export function runCliOnTerminal(
  args: string[],
  env: Record<string, string>,
  answer?: { waitFor: RegExp; typed: string },
): Promise<{ code: number | null; output: string }> {
  const quote = (word: string) => `'${word.replaceAll("'", "'\\''")}'`;
  const command = [process.execPath, CLI, ...args].map(quote).join(" ");
  const clean = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNPLANE_")));
  const child = spawn("script", ["-qec", command, "/dev/null"], {
    env: { ...clean, ...env },
    stdio: [answer ? "pipe" : "ignore", "pipe", "pipe"],
  });
  let output = "";
  let typed = false;
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
    output += chunk;
    if (answer && !typed && answer.waitFor.test(output)) {
      typed = true;
      child.stdin!.write(answer.typed);
    }
  });
  return new Promise((resolve) => child.on("close", (code) => resolve({ code, output })));
}
