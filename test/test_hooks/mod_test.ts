import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConfigError } from "../../server/config.ts";
import { NO_TEST_HOOKS, offsetClock, readTestHooks } from "../../server/test_hooks/mod.ts";
import { startTestServer } from "../_helpers/server.ts";

describe("the test-only hooks", () => {
  it("are off when their variables are unset", () => {
    assert.deepEqual(readTestHooks({}), NO_TEST_HOOKS);
    assert.deepEqual(NO_TEST_HOOKS, { delayLocalSyncMs: 0, clockOffsetMs: 0 });
  });

  it("read a delay as a duration and an offset as whole milliseconds, either way", () => {
    assert.deepEqual(
      readTestHooks({ RUNPLANE_TEST_DELAY_LOCAL_SYNC: "3s", RUNPLANE_TEST_CLOCK_OFFSET_MS: "-60000" }),
      { delayLocalSyncMs: 3000, clockOffsetMs: -60000 },
    );
    assert.equal(readTestHooks({ RUNPLANE_TEST_DELAY_LOCAL_SYNC: "250" }).delayLocalSyncMs, 250);
  });

  it("refuse a value out of bounds or malformed with a ConfigError naming each variable", () => {
    assert.throws(
      () => readTestHooks({ RUNPLANE_TEST_DELAY_LOCAL_SYNC: "61s", RUNPLANE_TEST_CLOCK_OFFSET_MS: "1.5" }),
      (error: unknown) => {
        assert.ok(error instanceof ConfigError);
        assert.deepEqual(error.problems, [
          'RUNPLANE_TEST_DELAY_LOCAL_SYNC="61s": must be a duration from 0s to 60s',
          'RUNPLANE_TEST_CLOCK_OFFSET_MS="1.5": must be a whole number of milliseconds from -86400000 to 86400000',
        ]);
        return true;
      },
    );
    assert.throws(() => readTestHooks({ RUNPLANE_TEST_CLOCK_OFFSET_MS: "86400001" }), ConfigError);
  });

  it("make an offset clock from a given one", () => {
    assert.equal(offsetClock(60_000, { now: () => 1_000 })(), 61_000);
    assert.equal(offsetClock(-500, { now: () => 1_000 })(), 500);
  });

  it("give a server's store an offset host clock without moving Date.now for the process", async () => {
    const realNow = Date.now;
    const t = await startTestServer({ env: { RUNPLANE_TEST_CLOCK_OFFSET_MS: "60000" } });
    try {
      assert.equal(Date.now, realNow, "Date.now is not replaced");
      const skew = t.server.context.store.clock.now() - Date.now();
      assert.ok(skew > 55_000 && skew < 65_000, `the store's clock (SQLite: the host's) is a minute ahead: ${skew}`);
    } finally {
      await t.close();
    }
  });
});
