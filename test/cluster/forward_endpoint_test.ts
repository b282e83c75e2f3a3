/**
 * The frames a host answers a forwarded call's failure with: a problem when the call never reached the
 * function — the store refusing the host's seat claim included (issue 44), so the forwarding host can
 * put an async run back on the queue — and the run's error when the function failed.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type Frame, serveForwardedCall } from "../../server/cluster/mod.ts";
import { passingReason, type RunExecutor } from "../../server/runs/executor.ts";
import { newRunId } from "../../server/runs/mod.ts";
import { NoSeatError, RunFailure } from "../../server/runtime/mod.ts";

/** An executor whose every call throws `error`. */
function throwing(error: unknown): RunExecutor {
  return {
    freeSlots: () => 1,
    gracePeriodMs: () => undefined,
    execute: () => Promise.reject(error),
  };
}

/** The frames `executor` answers one forwarded call with. */
async function framesOf(executor: RunExecutor): Promise<Frame[]> {
  const frames: Frame[] = [];
  const input = {
    projectId: "p",
    appId: "a",
    functionName: "f",
    inputJson: "{}",
    runId: newRunId(),
    signal: new AbortController().signal,
  };
  for await (const line of serveForwardedCall(input, executor)) frames.push(JSON.parse(line) as Frame);
  return frames;
}

describe("a forwarded call's failure frame", () => {
  it("is a 503 store-unavailable problem when the store refused before the function started", async () => {
    const refused = Object.assign(new Error("sorry, too many clients already"), { code: "53300" });
    const [frame, ...rest] = await framesOf(throwing(refused));
    assert.deepEqual(rest, []);
    assert.equal(frame.problem?.type, "store-unavailable");
    assert.equal(frame.problem?.status, 503);
    assert.equal(frame.problem?.retryAfter, "1");
    assert.match(frame.problem?.detail ?? "", /too many clients/);
  });

  it("is the seat's 503 service-unavailable problem when no replica may run here now", async () => {
    const [frame] = await framesOf(throwing(new NoSeatError("p/a")));
    assert.equal(frame.problem?.type, "service-unavailable");
  });

  it("is the run's error when the function failed, whatever its type says", async () => {
    const failure = new RunFailure("ValueError", "bad input", { runId: "run_x", exception: true });
    const [frame] = await framesOf(throwing(failure));
    assert.deepEqual(frame.error, { type: "ValueError", message: "bad input", traceback: null });
    assert.equal(frame.problem, undefined);
    assert.equal(passingReason(failure), null);
  });
});
