/**
 * Run retention on both engines: whole records past the retention are deleted with their logs,
 * delivery and attempts, in batches; recent runs, runs still running, runs whose result has not expired
 * and runs whose webhook is still being delivered stay.
 */
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";
import type { Insertable } from "kysely";
import pino from "pino";
import { createRunService } from "../../server/runs/mod.ts";
import { purgeExpiredRuns, retentionCutoff } from "../../server/runs/_retention.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import type { Store } from "../../server/store/mod.ts";
import type { RunTable } from "../../server/store/schema.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

const DAY = 86_400_000;
const NOW = Date.UTC(2026, 10, 24);
const RETENTION = { retentionMs: 30 * DAY, resultTtlMs: DAY, now: NOW };

interface Fixture {
  id: string;
  completedAt: number | null;
  status?: RunTable["status"];
  resultExpired?: 0 | 1;
  delivery?: "pending" | "delivered";
  logLines?: number;
}

function runRow(f: Fixture): Insertable<RunTable> {
  return {
    run_id: f.id,
    project_id: "p",
    app_id: "a",
    function_name: "f",
    mode: "async",
    status: f.status ?? "success",
    created_at: (f.completedAt ?? NOW) - 1000,
    started_at: (f.completedAt ?? NOW) - 500,
    completed_at: f.completedAt,
    queue_time_ms: 500,
    run_time_ms: 500,
    input_json: null,
    result_json: null,
    result_expired: f.resultExpired ?? 1,
    error_type: null,
    error_message: null,
    error_traceback: null,
    webhook_endpoint: f.delivery ? "https://example.com/hook" : null,
    webhook_secret: null,
    webhook_credentials: null,
    lease_owner: null,
    lease_expires_at: null,
  };
}

async function insertFixtures(store: Store, fixtures: Fixture[]): Promise<void> {
  await store.db.insertInto("runs").values(fixtures.map(runRow)).execute();
  for (const f of fixtures) {
    const at = f.completedAt ?? NOW;
    for (let seq = 1; seq <= (f.logLines ?? 0); seq++) {
      await store.db.insertInto("run_logs").values({ run_id: f.id, seq, at, stream: "stdout", line: `line ${seq}` })
        .execute();
    }
    if (!f.delivery) continue;
    await store.db.insertInto("webhook_deliveries").values({
      run_id: f.id,
      endpoint: "https://example.com/hook",
      body: "{}",
      secret: null,
      credentials: null,
      status: f.delivery,
      next_attempt_at: at,
      lease_owner: null,
      lease_expires_at: null,
      created_at: at,
      attempt_limit: null,
    }).execute();
    await store.db.insertInto("webhook_attempts").values({
      run_id: f.id,
      attempt: 1,
      at,
      status_code: f.delivery === "delivered" ? 200 : 503,
      error: null,
      duration_ms: 3,
    }).execute();
  }
}

async function remaining(store: Store, table: "runs" | "run_logs" | "webhook_deliveries" | "webhook_attempts") {
  const rows = await store.db.selectFrom(table).select("run_id").distinct().orderBy("run_id").execute();
  return rows.map((r) => r.run_id);
}

for (const engine of await engines()) {
  describe(`run retention (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
    });
    after(() => t?.close());
    beforeEach(async () => {
      for (const table of ["run_logs", "webhook_attempts", "webhook_deliveries", "runs"] as const) {
        await t.store.db.deleteFrom(table).execute();
      }
    });

    it("deletes whole records past the retention and keeps every other run", async () => {
      const old = NOW - 31 * DAY;
      await insertFixtures(t.store, [
        { id: "old-plain", completedAt: old },
        { id: "old-logged", completedAt: old, logLines: 3, delivery: "delivered" },
        { id: "old-failed", completedAt: old, status: "failure" },
        { id: "old-still-delivering", completedAt: old, delivery: "pending" },
        { id: "old-result-kept", completedAt: old, resultExpired: 0 },
        { id: "recent", completedAt: NOW - 29 * DAY, logLines: 1, delivery: "delivered" },
        { id: "running", completedAt: null, status: "running", resultExpired: 0 },
      ]);
      const deleted = await purgeExpiredRuns(t.store.db, RETENTION);
      assert.equal(deleted, 3);
      assert.deepEqual(await remaining(t.store, "runs"), [
        "old-result-kept",
        "old-still-delivering",
        "recent",
        "running",
      ]);
      assert.deepEqual(await remaining(t.store, "run_logs"), ["recent"]);
      assert.deepEqual(await remaining(t.store, "webhook_deliveries"), ["old-still-delivering", "recent"]);
      assert.deepEqual(await remaining(t.store, "webhook_attempts"), ["old-still-delivering", "recent"]);
    });

    it("goes in batches of batchSize: maxBatches bounds what one call deletes", async () => {
      const old = NOW - 40 * DAY;
      await insertFixtures(
        t.store,
        Array.from({ length: 25 }, (_, i) => ({ id: `old-${String(i).padStart(2, "0")}`, completedAt: old + i })),
      );
      assert.equal(await purgeExpiredRuns(t.store.db, { ...RETENTION, batchSize: 10, maxBatches: 1, pauseMs: 0 }), 10);
      assert.equal((await remaining(t.store, "runs"))[0], "old-10", "the oldest went first");
      assert.equal(await purgeExpiredRuns(t.store.db, { ...RETENTION, batchSize: 10, pauseMs: 0 }), 15);
      assert.deepEqual(await remaining(t.store, "runs"), []);
    });

    it("never deletes before the result TTL or the Idempotency-Key window, whatever the retention", () => {
      assert.equal(retentionCutoff({ retentionMs: 1000, resultTtlMs: 1000, now: NOW }), NOW - DAY);
      assert.equal(retentionCutoff({ retentionMs: 1000, resultTtlMs: 3 * DAY, now: NOW }), NOW - 3 * DAY);
      assert.equal(retentionCutoff({ retentionMs: 30 * DAY, resultTtlMs: DAY, now: NOW }), NOW - 30 * DAY);
    });

    it("the run service purges at start, with its configured retention", async () => {
      await insertFixtures(t.store, [
        { id: "ancient", completedAt: Date.now() - 10 * DAY, logLines: 2 },
        { id: "young", completedAt: Date.now() - 2 * DAY },
      ]);
      const service = createRunService({
        db: t.store.db,
        secrets: createSecretBox(new Uint8Array(32)),
        logger: pino({ level: "silent" }),
        config: { resultTtlMs: 1000, runRetentionMs: 5 * DAY, runLeaseMs: 30_000, webhookAllowPrivate: false },
      });
      try {
        const deadline = Date.now() + 10_000;
        while ((await remaining(t.store, "runs")).includes("ancient") && Date.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        assert.deepEqual(await remaining(t.store, "runs"), ["young"]);
        assert.deepEqual(await remaining(t.store, "run_logs"), []);
      } finally {
        await service.stop();
      }
    });
  });
}
