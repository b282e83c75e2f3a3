/**
 * The runtime as the runs module's `RunExecutor`. It lives in the composition root so that neither
 * `server/runs` nor `server/runtime` imports the other: each can change alone, and this adapter is the
 * one place that knows both.
 */
import type { RunExecutor } from "./runs/mod.ts";
import type { Runtime } from "./runtime/mod.ts";

/**
 * Adapts `runtime` to `RunExecutor`. A missing or broken app reports one free slot so that its queued
 * runs are claimed and fail with the reason (`not_found`, `app_unavailable`) instead of waiting forever.
 */
export function runtimeExecutor(runtime: Runtime): RunExecutor {
  return {
    freeSlots(target) {
      try {
        const { slots, busy, queued, waitingForCapacity } = runtime.capacity(target.projectId, target.app);
        // An app waiting for host capacity takes no more runs off the store's queue until it has room.
        if (waitingForCapacity > 0) return 0;
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
    execute(request) {
      return runtime.invoke(request);
    },
  };
}
