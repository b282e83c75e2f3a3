/**
 * A small in-process executor for run tests until the runtime is wired: real asynchronous work with
 * real timers that honours abort signals. Functions: `echo` (returns its input after `sleep_ms`),
 * `fail` (raises `ValueError`), `stream` (yields `items`), `hang` (never ends unless aborted).
 */
import { appendFileSync } from "node:fs";
import { type AppTarget, type ExecuteRequest, RunFailure, type RunExecutor } from "../../server/runs/mod.ts";

/** Options of `createTestExecutor`. */
export interface TestExecutorOptions {
  /** Slots per app (default 1); per-app overrides in `slotsByApp`. */
  slots?: number;
  slotsByApp?: Record<string, number>;
  /** Grace period per app in ms. */
  graceByApp?: Record<string, number>;
  /** Appends each started run id to this file (a side effect that survives a crash). */
  journal?: string;
}

/** The executor and what it saw. */
export interface TestExecutor {
  executor: RunExecutor;
  /** Run ids in the order they started. */
  started: string[];
  /** Run ids whose signal was aborted. */
  aborted: string[];
  /** The most runs an app ever had at once, by app name. */
  peak: Map<string, number>;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    timer.unref();
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

/** Creates the executor. */
export function createTestExecutor(options: TestExecutorOptions = {}): TestExecutor {
  const active = new Map<string, number>();
  const started: string[] = [];
  const aborted: string[] = [];
  const peak = new Map<string, number>();
  const keyOf = (t: AppTarget) => `${t.projectId}/${t.app}`;

  async function perform(request: ExecuteRequest): Promise<unknown> {
    const input = request.input as { sleep_ms?: number; items?: unknown[] };
    switch (request.functionName) {
      case "echo":
        await sleep(input.sleep_ms ?? 0, request.signal);
        return request.input;
      case "fail":
        throw new RunFailure("ValueError", "bad value", "Traceback (most recent call last):\n  ValueError: bad value");
      case "stream":
        return (async function* () {
          for (const item of input.items ?? []) yield item;
        })();
      case "hang":
        await sleep(3_600_000, request.signal);
        return null;
      default:
        throw new RunFailure("not_found", `No function ${request.functionName}`);
    }
  }

  const executor: RunExecutor = {
    freeSlots(target) {
      const slots = options.slotsByApp?.[target.app] ?? options.slots ?? 1;
      return slots - (active.get(keyOf(target)) ?? 0);
    },
    gracePeriodMs(target) {
      return options.graceByApp?.[target.app];
    },
    execute(request) {
      const key = keyOf(request);
      active.set(key, (active.get(key) ?? 0) + 1);
      peak.set(request.app, Math.max(peak.get(request.app) ?? 0, active.get(key)!));
      started.push(request.runId);
      if (options.journal) appendFileSync(options.journal, `${request.runId}\n`);
      request.signal.addEventListener("abort", () => aborted.push(request.runId), { once: true });
      return perform(request).finally(() => active.set(key, (active.get(key) ?? 1) - 1));
    },
  };
  return { executor, started, aborted, peak };
}
