/**
 * The runtime as the runs module's `RunExecutor`. It lives in the placement layer, under the composition
 * root, so that neither `server/runs` nor `server/runtime` imports the other (`npm run check` enforces
 * it): each can change alone. It is not the only file that knows both: above the two, the composition
 * root (`server/mod.ts`, `server/wiring/runs.ts`), the placement layer (this file, `_cluster_executor.ts`),
 * `server/context.ts` and `server/handlers/runs.ts` import both, and so do the folders that carry a call
 * between processes: `server/host/` (`role.ts`, `call_client.ts`, `channel_calls.ts`) and `server/cluster/`
 * (`forward_client.ts`, `forward_endpoint.ts`).
 */
import type { RunExecutor } from "../runs/mod.ts";
import type { Runtime } from "../runtime/mod.ts";

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
