import type { ServerContext } from "../context.ts";
import { frameEvent, type Handlers, withHeartbeat } from "../http/mod.ts";
import type { RunChange } from "../runs/mod.ts";

type RunEventHandlers = Pick<Handlers, "watchRuns">;

/** The most changes a subscriber may have waiting; past it, it is disconnected (memory stays bounded). */
const MAX_QUEUED = 1000;

/** `watchRuns`: the project's run changes as server-sent events. */
export function runEventHandlers(context: ServerContext): RunEventHandlers {
  return {
    watchRuns({ path, signal }) {
      const queue: Array<RunChange | "missed"> = [];
      let wake: (() => void) | undefined;
      let ended = false;
      const stop = context.runChanges.subscribe(path.project_id, (change) => {
        if (change === "closed" || queue.length >= MAX_QUEUED) ended = true;
        else queue.push(change);
        wake?.();
      });
      const onAbort = () => {
        ended = true;
        wake?.();
      };
      signal.addEventListener("abort", onAbort, { once: true });
      async function* frames(): AsyncGenerator<string> {
        try {
          // Sent at once, so the headers leave now (not with the first change) and EventSource waits 3 s
          // before reconnecting.
          yield "retry: 3000\n\n";
          while (!ended) {
            if (queue.length === 0) {
              await new Promise<void>((resolve) => (wake = resolve));
              wake = undefined;
              continue;
            }
            const change = queue.shift()!;
            yield change === "missed" ? frameEvent("{}", { event: "resync" }) : frameEvent(JSON.stringify(change));
          }
        } finally {
          stop();
          signal.removeEventListener("abort", onAbort);
        }
      }
      return Promise.resolve({
        status: 200,
        contentType: "text/event-stream",
        body: withHeartbeat(frames(), { intervalMs: context.config.sseHeartbeatMs }),
      });
    },
  };
}
