import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Store } from "../../server/store/mod.ts";
import { enqueueDelivery, redeliver } from "../../server/webhooks/outbox.ts";
import { REDELIVERY_LIMIT, takeRedelivery } from "../../server/webhooks/redelivery_limit.ts";
import { openClaimerStores } from "../_helpers/claimers.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

describe("the redelivery token bucket", () => {
  it("allows 5 at once, then one every 12 s", () => {
    assert.deepEqual(REDELIVERY_LIMIT, { burst: 5, intervalMs: 12_000 });
    let fullAt: number | null = null;
    for (let i = 0; i < 5; i++) {
      const taken = takeRedelivery(fullAt, { now: 1_000_000 });
      assert.ok(taken.ok, `redelivery ${i + 1}`);
      fullAt = taken.fullAt;
    }
    assert.deepEqual(takeRedelivery(fullAt, { now: 1_000_000 }), { ok: false, retryAfterMs: 12_000 });
    assert.deepEqual(takeRedelivery(fullAt, { now: 1_011_000 }), { ok: false, retryAfterMs: 1_000 });
    const next = takeRedelivery(fullAt, { now: 1_012_000 });
    assert.ok(next.ok, "one token back after 12 s");
    assert.equal(takeRedelivery(next.fullAt, { now: 1_012_000 }).ok, false, "and only one");
  });

  it("is full again after a quiet minute, never fuller", () => {
    const full = takeRedelivery(1_060_000, { now: 2_000_000 });
    assert.deepEqual(full, { ok: true, fullAt: 2_012_000 });
  });
});

for (const engine of await engines()) {
  describe(`redelivery limit in the store, shared by processes (${engine})`, () => {
    let t: TestStore;
    let other: Store;
    before(async () => {
      t = await openTestStore(engine);
      [other] = await openClaimerStores(t, 1);
    });
    after(async () => {
      await other?.close();
      await t?.close();
    });

    async function settle(runId: string): Promise<void> {
      await t.store.db.updateTable("webhook_deliveries").set({ status: "delivered" }).where("run_id", "=", runId)
        .execute();
    }

    it("counts the redeliveries made through every store of a run, and only that run's", async () => {
      const now = 5_000_000;
      for (const runId of ["run_limited", "run_other"]) {
        await enqueueDelivery(
          t.store.db,
          { runId, endpoint: "https://example.test/", body: "{}", sealedSecret: null },
          {
            now,
          },
        );
        await settle(runId);
      }
      for (let i = 0; i < 5; i++) {
        const db = i % 2 ? other.db : t.store.db; // two processes, one store
        assert.deepEqual(await redeliver(db, { runId: "run_limited", now, expiredBefore: 0 }), { ok: true });
        await settle("run_limited");
      }
      assert.deepEqual(await redeliver(other.db, { runId: "run_limited", now: now + 1_000, expiredBefore: 0 }), {
        ok: false,
        reason: "rate-limited",
        retryAfterMs: 11_000,
      });
      const row = await t.store.db.selectFrom("webhook_deliveries").select(["status", "attempt_limit"])
        .where("run_id", "=", "run_limited").executeTakeFirstOrThrow();
      assert.equal(row.status, "delivered", "a refusal changes nothing");
      assert.deepEqual(await redeliver(t.store.db, { runId: "run_other", now, expiredBefore: 0 }), { ok: true });
      assert.deepEqual(await redeliver(t.store.db, { runId: "run_limited", now: now + 12_000, expiredBefore: 0 }), {
        ok: true,
      });
    });
  });
}
