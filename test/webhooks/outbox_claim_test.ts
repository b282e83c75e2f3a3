/**
 * Claiming due webhook deliveries on both engines: only due ones whose lease is free or ran out, at
 * most the limit, and with several stores (processes) claiming at once, every delivery claimed once.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Queryable, Store } from "../../server/store/mod.ts";
import {
  type AttemptStart,
  claimDueDeliveries,
  enqueueDelivery,
  recordAttemptStarts,
} from "../../server/webhooks/outbox.ts";
import { claimConcurrently, openClaimerStores, tally } from "../_helpers/claimers.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

async function enqueue(db: Queryable, options: { prefix: string; count: number; now: number }): Promise<string[]> {
  const ids = Array.from({ length: options.count }, (_, i) => `${options.prefix}-${String(i).padStart(5, "0")}`);
  for (const runId of ids) {
    await enqueueDelivery(db, { runId, endpoint: "https://example.test/hook", body: "{}", sealedSecret: null }, {
      now: options.now,
    });
  }
  return ids;
}

function claimable(store: Store, now: number): Promise<number> {
  return store.db.selectFrom("webhook_deliveries").select((eb) => eb.fn.countAll().as("n"))
    .where("status", "=", "pending")
    .where("next_attempt_at", "<=", now)
    .where((eb) => eb.or([eb("lease_expires_at", "is", null), eb("lease_expires_at", "<", now)]))
    .executeTakeFirstOrThrow().then((r) => Number(r.n));
}

for (const engine of await engines()) {
  describe(`claiming due webhook deliveries (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
    });
    after(() => t?.close());

    it("claims only due deliveries whose lease is free or ran out, at most the limit", async () => {
      const db = t.store.db;
      const [free, held, expired, later] = await enqueue(db, { prefix: "one", count: 4, now: 1_000 });
      await db.updateTable("webhook_deliveries").set({ lease_owner: "alive", lease_expires_at: 50_000 }).where(
        "run_id",
        "=",
        held,
      ).execute();
      await db.updateTable("webhook_deliveries").set({ lease_owner: "dead", lease_expires_at: 1_500 }).where(
        "run_id",
        "=",
        expired,
      ).execute();
      await db.updateTable("webhook_deliveries").set({ next_attempt_at: 90_000 }).where("run_id", "=", later).execute();

      const first = await claimDueDeliveries(db, { owner: "me", now: 2_000, leaseMs: 10_000, limit: 1 });
      assert.equal(first.length, 1, "no more than the limit");
      const second = await claimDueDeliveries(db, { owner: "me", now: 2_000, leaseMs: 10_000, limit: 10 });
      assert.deepEqual([...first, ...second].map((d) => d.run_id).sort(), [free, expired]);
      for (const d of [...first, ...second]) {
        assert.equal(typeof d.created_at, "number");
        assert.equal(d.attempts, 0);
      }
      const rows = await db.selectFrom("webhook_deliveries").select(["run_id", "lease_owner", "lease_expires_at"])
        .where("run_id", "like", "one-%").orderBy("run_id").execute();
      assert.deepEqual(
        rows.map((r) => [r.lease_owner, r.lease_expires_at === null ? null : Number(r.lease_expires_at)]),
        [
          ["me", 12_000],
          ["alive", 50_000],
          ["me", 12_000],
          [null, null],
        ],
      );
      assert.deepEqual(await claimDueDeliveries(db, { owner: "you", now: 3_000, leaseMs: 10_000, limit: 10 }), []);
      const afterLease = await claimDueDeliveries(db, { owner: "you", now: 12_001, leaseMs: 10_000, limit: 10 });
      assert.deepEqual(afterLease.map((d) => d.run_id).sort(), [free, expired], "a lease that ran out frees them");
      await db.deleteFrom("webhook_deliveries").where("run_id", "like", "one-%").execute();
    });

    it("leaves out the runs the claimer names (its own, still in flight) whatever their lease says", async () => {
      const db = t.store.db;
      const [mine, other] = await enqueue(db, { prefix: "skip", count: 2, now: 1_000 });
      await db.updateTable("webhook_deliveries").set({ lease_owner: "me", lease_expires_at: 1_500 })
        .where("run_id", "like", "skip-%").execute();
      const claimed = await claimDueDeliveries(db, {
        owner: "me",
        now: 2_000,
        leaseMs: 10_000,
        limit: 10,
        skipRuns: [mine],
      });
      assert.deepEqual(claimed.map((d) => d.run_id), [other]);
      await db.deleteFrom("webhook_deliveries").where("run_id", "like", "skip-%").execute();
    });

    it("counts and lists an attempt only while its claimer holds the pending delivery until the attempt's end", async () => {
      const db = t.store.db;
      const [held, short, taken, free] = await enqueue(db, { prefix: "start", count: 4, now: 1_000 });
      const lease = (runId: string, owner: string, expiresAt: number) =>
        db.updateTable("webhook_deliveries").set({ lease_owner: owner, lease_expires_at: expiresAt })
          .where("run_id", "=", runId).execute();
      await lease(held, "me", 20_000);
      await lease(short, "me", 5_000);
      await lease(taken, "you", 20_000);
      const starts: AttemptStart[] = [held, short, taken, free].map((runId) => ({
        runId,
        attempt: 1,
        at: 2_000,
        holdUntil: 12_000,
      }));
      await recordAttemptStarts(db, starts, { owner: "me" });
      assert.deepEqual(starts.map((start) => start.held), [true, false, false, false]);
      const listed = await db.selectFrom("webhook_attempts").select("run_id").where("run_id", "like", "start-%")
        .execute();
      assert.deepEqual(listed.map((row) => row.run_id), [held], "an attempt not sent is not listed");
      const counted = await db.selectFrom("webhook_deliveries").select(["run_id", "attempts"])
        .where("run_id", "like", "start-%").orderBy("run_id").execute();
      assert.deepEqual(counted.map((row) => Number(row.attempts)), [1, 0, 0, 0]);
      await db.deleteFrom("webhook_attempts").where("run_id", "like", "start-%").execute();
      await db.deleteFrom("webhook_deliveries").where("run_id", "like", "start-%").execute();
    });

    it("8 stores claiming 500 due deliveries at once: each claimed exactly once, no claim over its limit", async () => {
      const now = 10_000;
      const ids = await enqueue(t.store.db, { prefix: "many", count: 500, now });
      const stores = await openClaimerStores(t, 8);
      try {
        const records = await claimConcurrently(stores, {
          maxLimit: 7,
          claim: async (store, { owner, limit }) =>
            (await claimDueDeliveries(store.db, { owner, now, leaseMs: 60_000, limit })).map((d) => d.run_id),
          remaining: (store) => claimable(store, now),
        });
        const { ids: claimed, overLimit, claimers } = tally(records);
        assert.deepEqual(overLimit, [], "no claim returned more than its limit");
        assert.equal(claimed.length, 500, `claimed ${claimed.length} times for 500 deliveries`);
        assert.deepEqual([...new Set(claimed)].sort(), ids, "every delivery claimed, none twice");
        const owners = new Map(
          records.flatMap((r) => r.claims.flatMap((c) => c.ids.map((id) => [id, r.owner] as const))),
        );
        const rows = await t.store.db.selectFrom("webhook_deliveries").select(["run_id", "lease_owner"]).execute();
        for (const row of rows) {
          assert.equal(
            row.lease_owner,
            owners.get(row.run_id),
            `${row.run_id} is held by the claimer it was returned to`,
          );
        }
        console.log(`# ${engine}: ${claimers} of 8 claimers took deliveries`);
      } finally {
        await Promise.all(stores.map((s) => s.close()));
      }
    });
  });
}
