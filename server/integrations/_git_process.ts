/** Runs git itself, without a shell, with an environment that ignores the caller's git settings. */
import { spawn } from "node:child_process";
import { dirname } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { StringDecoder } from "node:string_decoder";

/** git exited with a failure; `stderr` says why (never shown to API callers as is). */
export class GitError extends Error {
  readonly exitCode: number | null;
  readonly stderr: string;
  constructor(args: string[], exitCode: number | null, stderr: string) {
    super(`git ${args[0]} failed (exit ${exitCode}): ${stderr.trim().split("\n")[0] ?? ""}`);
    this.name = "GitError";
    this.exitCode = exitCode;
    this.stderr = stderr;
  }
}

/** Options of `runGit` and `streamGit`. */
export interface GitOptions {
  /** The repository folder (bare, or with a work tree); git never looks above it. */
  cwd: string;
  signal?: AbortSignal;
  /** Kills git after this many ms (default 120 s). */
  timeoutMs?: number;
}

function gitEnv(cwd: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const name of ["PATH", "HOME", "TMPDIR", "SYSTEMROOT"]) {
    if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  return {
    ...env,
    LC_ALL: "C",
    GIT_CEILING_DIRECTORIES: dirname(cwd),
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_TERMINAL_PROMPT: "0",
    GIT_NO_REPLACE_OBJECTS: "1",
    GIT_OPTIONAL_LOCKS: "0",
  };
}

function spawnGit(args: string[], options: GitOptions) {
  return spawn("git", args, {
    cwd: options.cwd,
    env: gitEnv(options.cwd),
    shell: false,
    stdio: ["ignore", "pipe", "pipe"],
    signal: options.signal,
    timeout: options.timeoutMs ?? 120_000,
  });
}

/**
 * Runs `git <args>` and calls `onRecord` with each `separator`-terminated record of its output as it
 * arrives, so a large listing is never held whole. Rejects with a `GitError` when git fails.
 */
export function streamGit(
  args: string[],
  options: GitOptions & { separator: string; onRecord(record: string): void },
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawnGit(args, options);
    const decoder = new StringDecoder("utf8");
    let pending = "";
    let stderr = "";
    let failed: unknown;
    child.stdout.on("data", (chunk: Buffer) => {
      if (failed) return;
      pending += decoder.write(chunk);
      let end = pending.indexOf(options.separator);
      let start = 0;
      try {
        while (end !== -1) {
          options.onRecord(pending.slice(start, end));
          start = end + options.separator.length;
          end = pending.indexOf(options.separator, start);
        }
      } catch (error) {
        failed = error;
        child.kill();
      }
      pending = pending.slice(start);
    });
    child.stderr.on("data", (chunk: Buffer) => {
      if (stderr.length < 8192) stderr += chunk.toString("utf8");
    });
    child.once("error", reject);
    child.once("close", (code) => {
      if (failed) return reject(failed);
      if (code !== 0) return reject(new GitError(args, code, stderr));
      pending += decoder.end();
      if (pending) options.onRecord(pending);
      resolve();
    });
  });
}

/** Runs `git <args>` and resolves with its output, trimmed; rejects with a `GitError` when git fails. */
export async function runGit(args: string[], options: GitOptions): Promise<string> {
  const parts: string[] = [];
  await streamGit(args, { ...options, separator: "\n", onRecord: (line) => parts.push(line) });
  return parts.join("\n").trim();
}

/**
 * Runs `git <args>` and gives its output as a stream of bytes, for output too large to hold (an archive);
 * the stream ends with a `GitError` when git fails, and destroying it kills git.
 */
export function gitOutputStream(args: string[], options: GitOptions): Readable {
  const child = spawnGit(args, options);
  const out = new PassThrough();
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => {
    if (stderr.length < 8192) stderr += chunk.toString("utf8");
  });
  child.stdout.pipe(out, { end: false });
  child.once("error", (error) => out.destroy(error));
  child.once("close", (code) => (code === 0 ? out.end() : out.destroy(new GitError(args, code, stderr))));
  out.once("close", () => child.kill());
  return out;
}
