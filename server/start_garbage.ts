/**
 * Gives back to the system, once, the memory a server's start used and no longer needs.
 *
 * Starting (the modules, the contract's validators, the apps folder and the deployments) allocates fast
 * enough that V8 grows its young generation to its maximum (two 16 MiB semi-spaces) and keeps it. An idle
 * server shrinks it only when V8's memory reducer finds the process idle: ~10 s after the start on a quiet
 * host, and not within 20 s on a busy one. On a 2-core machine a built server's RSS 3 s after it answered
 * fell from 148–159 MiB to 118–122 MiB with this collection (docs/performance.md, idle RSS). Load grows
 * the young generation again as it needs it: the collection costs nothing per call.
 */
import type { Logger } from "./log.ts";

/** Options of `releaseStartGarbage`. */
export interface ReleaseStartGarbageOptions {
  logger: Logger;
}

/**
 * One full collection that also shrinks the young generation (V8's low-memory notification); resolves
 * once it has run. It never rejects: without an inspector in this Node build, it does nothing.
 */
export async function releaseStartGarbage(options: ReleaseStartGarbageOptions): Promise<void> {
  const rssBefore = process.memoryUsage.rss();
  const started = performance.now();
  try {
    // The in-process inspector (no port is opened) is the only way Node gives to a low-memory
    // collection: `gc()` needs `--expose-gc`, and its full collection keeps the young generation's size.
    const { Session } = await import("node:inspector");
    const session = new Session();
    session.connect();
    await new Promise<void>((resolve, reject) =>
      session.post("HeapProfiler.collectGarbage", (error) => (error ? reject(error) : resolve()))
    ).finally(() => session.disconnect());
  } catch (error) {
    options.logger.debug({ err: error }, "the start's garbage could not be released");
    return;
  }
  options.logger.debug({
    rss_before_mib: Math.round(rssBefore / 1048576),
    rss_after_mib: Math.round(process.memoryUsage.rss() / 1048576),
    ms: Math.round(performance.now() - started),
  }, "released the start's garbage");
}
