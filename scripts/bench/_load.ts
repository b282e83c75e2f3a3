import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { promisify } from "node:util";

const run = promisify(execFile);
const AUTOCANNON = createRequire(import.meta.url).resolve("autocannon/autocannon.js");

/** One load run's figures. */
export interface LoadResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  total: number;
  non2xx: number;
  errors: number;
}

/** What to send. */
export interface LoadOptions {
  method?: "GET" | "POST";
  headers?: Record<string, string>;
  body?: string;
  connections?: number;
  durationSeconds?: number;
  /** Stop after this many requests instead of after a duration. */
  amount?: number;
}

/**
 * Drives `url` with autocannon in a separate process (so the load generator never shares the event
 * loop it measures) and returns its throughput and latency. On a many-core machine
 * `BENCH_LOAD_CPUS=14-15` pins the generator to cores of its own (`taskset`, so that it never takes a
 * core from the subject) and `BENCH_LOAD_WORKERS=2` gives it that many threads (autocannon `-w`).
 */
export async function loadTest(url: string, options: LoadOptions = {}): Promise<LoadResult> {
  const args = [AUTOCANNON, "--json", "-c", String(options.connections ?? 32), "-m", options.method ?? "GET"];
  if (process.env.BENCH_LOAD_WORKERS) args.push("-w", process.env.BENCH_LOAD_WORKERS);
  if (options.amount) args.push("-a", String(options.amount));
  else args.push("-d", String(options.durationSeconds ?? 8));
  for (const [name, value] of Object.entries(options.headers ?? {})) args.push("-H", `${name}=${value}`);
  if (options.body !== undefined) args.push("-b", options.body);
  args.push(url);
  const pin = process.env.BENCH_LOAD_CPUS;
  const { stdout } = pin
    ? await run("taskset", ["-c", pin, process.execPath, ...args], { maxBuffer: 64 * 1024 * 1024 })
    : await run(process.execPath, args, { maxBuffer: 64 * 1024 * 1024 });
  const result = JSON.parse(stdout) as {
    requests: { average: number; total: number };
    latency: { p50: number; p99: number };
    non2xx: number;
    errors: number;
    duration: number;
  };
  return {
    requestsPerSecond: result.requests.total / result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    total: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}
