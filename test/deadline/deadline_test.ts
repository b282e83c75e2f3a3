import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { startDeadline, startLightDeadline } from "../../server/deadline/mod.ts";

// The light deadline (no AbortSignal) behaves as the AbortController one does.
const FACTORIES = [["startDeadline", startDeadline], ["startLightDeadline", startLightDeadline]] as const;

for (const [name, start] of FACTORIES) {
  describe(name, () => {
    it("aborts with a TimeoutError once the time is up", async () => {
      const deadline = start(30);
      assert.equal(deadline.signal.aborted, false);
      await sleep(200);
      assert.equal(deadline.signal.aborted, true);
      assert.equal(deadline.timedOut, true);
      assert.equal((deadline.signal.reason as DOMException).name, "TimeoutError");
    });

    it("aborts with the parent's reason when the parent aborts first, and is not a timeout", () => {
      const parent = new AbortController();
      const deadline = start(10_000, { signal: parent.signal });
      parent.abort(new Error("stopping"));
      assert.equal(deadline.signal.aborted, true);
      assert.equal(deadline.timedOut, false);
      assert.equal((deadline.signal.reason as Error).message, "stopping");
      deadline.clear();
    });

    it("starts aborted under an aborted parent, and never fires once cleared", async () => {
      const parent = new AbortController();
      parent.abort();
      assert.equal(start(10_000, { signal: parent.signal }).signal.aborted, true);
      const cleared = start(20);
      cleared.clear();
      await sleep(100);
      assert.equal(cleared.signal.aborted, false);
    });
  });
}
