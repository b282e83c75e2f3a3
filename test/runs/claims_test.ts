/**
 * Claiming queued runs on both engines: oldest first, never more than the limit, and with several
 * stores (processes) claiming at once, every run claimed exactly once; lease renewal in one statement.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { claimQueuedRuns, renewLeases } from "../../server/runs/_queries.ts";
import type { Queryable, Store } from "../../server/store/mod.ts";
import { sql } from "kysely";
import { claimConcurrently, openClaimerStores, tally } from "../_helpers/claimers.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

async function queueRuns(db: Queryable, options: { app: string; count: number; createdAt: number }): Promise<string[]> {
  const ids = Array.from({ length: options.count }, (_, i) => `run-${options.app}-${String(i).padStart(5, "0")}`);
  for (let i = 0; i < ids.length; i += 100) {
    await db.insertInto("runs").values(
      ids.slice(i, i + 100).map((run_id) => ({
        run_id,
        project_id: "p",
        app_id: options.app,
        function_name: "f",
        mode: "async",
        status: "queued",
        created_at: options.createdAt,
        started_at: null,
        completed_at: null,
        queue_time_ms: null,
        run_time_ms: null,
        input_json: "{}",
        result_json: null,
        error_type: null,
        error_message: null,
        error_traceback: null,
        webhook_endpoint: null,
        webhook_secret: null,
        webhook_credentials: null,
        lease_owner: null,
        lease_expires_at: null,
      })),
    ).execute();
  }
  return ids;
}

function queuedCount(store: Store, app: string): Promise<number> {
  return store.db.selectFrom("runs").select((eb) => eb.fn.countAll().as("n")).where("status", "=", "queued").where(
    "app_id",
    "=",
    app,
  ).executeTakeFirstOrThrow().then((r) => Number(r.n));
}

for (const engine of await engines()) {
  describe(`claiming queued runs (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
    });
    after(() => t?.close());

    it("claims the oldest first, at most the limit, with the lease and queue time from the given clock", async () => {
      const ids = await queueRuns(t.store.db, { app: "a1", count: 10, createdAt: 1_000 });
      const claimed = await claimQueuedRuns(t.store.db, {
        projectId: "p",
        appId: "a1",
        owner: "me",
        leaseMs: 30_000,
        limit: 3,
        now: 5_000,
      });
      assert.deepEqual(claimed.map((r) => r.run_id), ids.slice(0, 3));
      for (const row of claimed) {
        assert.equal(row.status, "running");
        assert.equal(row.lease_owner, "me");
        assert.equal(row.lease_expires_at, 35_000);
        assert.equal(row.started_at, 5_000);
        assert.equal(Number(row.queue_time_ms), 4_000);
        assert.equal(typeof row.created_at, "number", "bigints arrive as numbers");
      }
      const other = await claimQueuedRuns(t.store.db, {
        projectId: "p",
        appId: "other",
        owner: "me",
        leaseMs: 30_000,
        limit: 5,
      });
      assert.deepEqual(other, [], "another app's queue is empty");
      const rest = await claimQueuedRuns(t.store.db, {
        projectId: "p",
        appId: "a1",
        owner: "you",
        leaseMs: 1,
        limit: 50,
      });
      assert.deepEqual(rest.map((r) => r.run_id), ids.slice(3), "running runs are not claimed again");
    });

    it("a prepared claim still claims after a newer version's migration adds a column to runs", async () => {
      // The server's pool prepares the claim; another process's migration then changes the table.
      const [claimer] = await openClaimerStores(t, 1);
      try {
        await queueRuns(t.store.db, { app: "upgrade", count: 6, createdAt: 1_000 });
        const claim = (appId: string) =>
          claimQueuedRuns(claimer.db, { projectId: "p", appId, owner: "old", leaseMs: 1_000, limit: 1 });
        // Six claims: past the five after which PostgreSQL may keep a prepared statement's generic plan.
        for (let i = 0; i < 6; i++) assert.equal((await claim("upgrade")).length, 1);
        await sql`alter table "runs" add column "added_by_a_newer_version" integer`.execute(t.store.db);
        await queueRuns(t.store.db, { app: "upgraded", count: 1, createdAt: 2_000 });
        const [claimed] = await claim("upgraded");
        assert.equal(claimed?.run_id, "run-upgraded-00000");
        assert.ok(!("added_by_a_newer_version" in claimed), "the claim returns the columns this version knows");
      } finally {
        await claimer.close();
        await sql`alter table "runs" drop column "added_by_a_newer_version"`.execute(t.store.db);
      }
    });

    it("renews the owner's leases in one statement and reports the runs whose cancel was asked for", async () => {
      await queueRuns(t.store.db, { app: "a2", count: 3, createdAt: 1_000 });
      const claimed = await claimQueuedRuns(t.store.db, {
        projectId: "p",
        appId: "a2",
        owner: "renewer",
        leaseMs: 1_000,
        limit: 3,
        now: 2_000,
      });
      await t.store.db.updateTable("runs").set({ cancel_requested: 1 }).where("run_id", "=", claimed[1].run_id)
        .execute();
      await t.store.db.updateTable("runs").set({ status: "success", lease_owner: null }).where(
        "run_id",
        "=",
        claimed[2].run_id,
      ).execute();
      const cancels = await renewLeases(t.store.db, { owner: "renewer", leaseMs: 60_000, now: 10_000 });
      assert.deepEqual(cancels, [claimed[1].run_id]);
      const rows = await t.store.db.selectFrom("runs").select(["run_id", "lease_expires_at"]).where("app_id", "=", "a2")
        .orderBy("run_id").execute();
      assert.deepEqual(
        rows.map((r) => Number(r.lease_expires_at)),
        [70_000, 70_000, 3_000],
        "an ended run keeps its old lease",
      );
    });

    it("8 stores claiming 500 queued runs at once: each run claimed exactly once, no claim over its limit", async () => {
      const ids = await queueRuns(t.store.db, { app: "busy", count: 500, createdAt: 1_000 });
      const stores = await openClaimerStores(t, 8);
      try {
        const records = await claimConcurrently(stores, {
          maxLimit: 7,
          claim: async (store, { owner, limit }) =>
            (await claimQueuedRuns(store.db, { projectId: "p", appId: "busy", owner, leaseMs: 60_000, limit })).map((
              r,
            ) => r.run_id),
          remaining: (store) => queuedCount(store, "busy"),
        });
        const { ids: claimed, overLimit, claimers } = tally(records);
        assert.deepEqual(overLimit, [], "no claim returned more than its limit");
        assert.equal(claimed.length, 500, `claimed ${claimed.length} times for 500 runs`);
        assert.deepEqual([...new Set(claimed)].sort(), ids, "every run claimed, none twice");
        const owners = new Map(
          records.flatMap((r) => r.claims.flatMap((c) => c.ids.map((id) => [id, r.owner] as const))),
        );
        const rows = await t.store.db.selectFrom("runs").select(["run_id", "status", "lease_owner"]).where(
          "app_id",
          "=",
          "busy",
        ).execute();
        for (const row of rows) {
          assert.equal(row.status, "running");
          assert.equal(
            row.lease_owner,
            owners.get(row.run_id),
            `${row.run_id} is held by the claimer it was returned to`,
          );
        }
        console.log(`# ${engine}: ${claimers} of 8 claimers took runs`);
      } finally {
        await Promise.all(stores.map((s) => s.close()));
      }
    });
  });
}
