/** Latency samples of one kind of request, taken by a few callers in a loop from the benchmark's process. */

/** What `sampleLatency` measured. */
export interface LatencySample {
  count: number;
  failures: number;
  p50Ms: number;
  p99Ms: number;
  perSecond: number;
}

/** Options of `sampleLatency`. */
export interface SampleOptions {
  headers?: Record<string, string>;
  method?: "GET" | "POST";
  body?: string;
  /** Callers at once (default 8). */
  concurrency?: number;
  /** How long (default 3 s). */
  durationMs?: number;
}

/** The `p`th percentile of `sorted` (ascending), nearest rank; NaN when empty. */
export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * Calls `nextUrl()`'s URL over and over with `concurrency` callers for `durationMs` and returns the
 * latency percentiles (for requests whose URL changes each time, which autocannon cannot send).
 */
export async function sampleLatency(nextUrl: () => string, options: SampleOptions = {}): Promise<LatencySample> {
  const latencies: number[] = [];
  let failures = 0;
  const started = performance.now();
  const end = started + (options.durationMs ?? 3000);
  async function caller(): Promise<void> {
    while (performance.now() < end) {
      const at = performance.now();
      const response = await fetch(nextUrl(), {
        method: options.method ?? "GET",
        headers: options.headers,
        body: options.body,
      });
      await response.arrayBuffer();
      latencies.push(performance.now() - at);
      if (!response.ok) failures++;
    }
  }
  await Promise.all(Array.from({ length: options.concurrency ?? 8 }, caller));
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    count: latencies.length,
    failures,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    perSecond: latencies.length / seconds,
  };
}
