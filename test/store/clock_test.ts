/**
 * The database clock runs on the monotonic clock between its measures of the database's time, so a jump
 * of the host's clock does not move it; a jump is noticed and measured again at once.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { sql } from "kysely";
import { startDatabaseClock } from "../../server/store/clock.ts";
import { engines, openTestStore } from "../_helpers/postgres.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

describe("the database clock", () => {
  it("is not moved by a jump of the host's clock, and measures the database again when it sees one", async () => {
    let jumpMs = 0;
    let measures = 0;
    const clock = await startDatabaseClock(() => {
      measures++;
      return Promise.resolve(Date.now());
    }, { localNow: () => Date.now() + jumpMs, refreshMs: 600_000 });
    try {
      assert.equal(measures, 1);
      jumpMs = 10 * 60_000;
      assert.ok(Math.abs(clock.now() - Date.now()) < 1000, "the host's jump does not move it");
      await eventually(async () => (measures === 2 ? true : undefined), 5_000, "a measure after the jump");
      assert.ok(Math.abs(clock.offsetMs + jumpMs) < 1000, `the offset follows the jump: ${clock.offsetMs}`);
      assert.ok(Math.abs(clock.now() - Date.now()) < 1000);
      // No jump since the last measure: no more measures.
      clock.now();
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(measures, 2);
    } finally {
      clock.stop();
    }
  });

  it("measures the database again every few seconds by default", async () => {
    let measures = 0;
    const clock = await startDatabaseClock(() => {
      measures++;
      return Promise.resolve(Date.now());
    });
    try {
      await eventually(async () => (measures >= 2 ? true : undefined), 15_000, "a second measure");
    } finally {
      clock.stop();
    }
  });
});

for (const engine of await engines()) {
  describe(`the store's clock (${engine})`, () => {
    it("agrees with the database's clock", async () => {
      const t = await openTestStore(engine);
      try {
        const { rows } = await sql<{ now: number }>`${
          sql.raw(
            engine === "postgres"
              ? "select (extract(epoch from clock_timestamp()) * 1000)::float8 as now"
              : "select cast((julianday('now') - 2440587.5) * 86400000 as integer) as now",
          )
        }`.execute(t.store.db);
        assert.ok(
          Math.abs(Number(rows[0].now) - t.store.clock.now()) < 2_000,
          `${rows[0].now} vs ${t.store.clock.now()}`,
        );
      } finally {
        await t.close();
      }
    });
  });
}
