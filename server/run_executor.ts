/**
 * The runtime as the runs module's `RunExecutor`. It lives in the composition root so that neither
 * `server/runs` nor `server/runtime` imports the other: each can change alone, and this adapter is the
 * one place that knows both.
 */
import { isProblemError } from "./problems/mod.ts";
import { type RunExecutor, RunFailure as RecordedFailure } from "./runs/mod.ts";
import type { Runtime, StreamItem } from "./runtime/mod.ts";

async function* values(items: AsyncIterable<StreamItem>): AsyncGenerator<unknown> {
  for await (const item of items) yield item.value;
}

/**
 * Adapts `runtime` to `RunExecutor`. A missing or broken app reports one free slot so that its queued
 * runs are claimed and fail with the reason (`not_found`, `app_unavailable`) instead of waiting forever.
 */
export function runtimeExecutor(runtime: Runtime): RunExecutor {
  return {
    freeSlots(target) {
      try {
        const { slots, busy, queued } = runtime.capacity(target.projectId, target.app);
        return Math.max(0, slots - busy - queued);
      } catch {
        return 1;
      }
    },
    gracePeriodMs(target) {
      try {
        return runtime.appSettings(target.projectId, target.app).responseGracePeriodMs;
      } catch {
        return undefined;
      }
    },
    async execute(request) {
      try {
        const outcome = await runtime.invoke(request);
        return outcome.kind === "result" ? outcome.result : values(outcome.items);
      } catch (error) {
        // A call that never started (unknown app or function, app failed to load) has no errorType.
        if (isProblemError(error) && !("errorType" in error)) {
          throw new RecordedFailure(error.kind.replace(/-/g, "_"), error.message);
        }
        throw error;
      }
    },
  };
}
