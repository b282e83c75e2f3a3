import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, it } from "node:test";
import { type Kysely, sql } from "kysely";
import pg from "pg";
import { createLogger } from "../../server/log.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { createRunService } from "../../server/runs/mod.ts";
import { type Database, ensureProject, openStore } from "../../server/store/mod.ts";
import {
  type DeliveryWorker,
  type DeliveryWorkerOptions,
  enqueueDelivery,
  MAX_ATTEMPTS,
  startDeliveryWorker,
  webhookViews,
} from "../../server/webhooks/mod.ts";
import { OUTCOME_UNKNOWN, recordAttempts, recordAttemptStarts } from "../../server/webhooks/outbox.ts";

import { engines, openTestStore } from "../_helpers/postgres.ts";
import { eventually, startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

/** A worker over `db` that polls once at start and then not within a test: only a wake or a hand-off moves it. */
function startTestWorker(db: Kysely<Database>, options: Partial<DeliveryWorkerOptions> = {}): DeliveryWorker {
  return startDeliveryWorker({
    db,
    secrets: createSecretBox(randomBytes(32)),
    logger: createLogger({ level: "silent" }),
    headerVendor: "Runplane",
    timeoutMs: 5_000,
    retryDelayMs: 1_000,
    guard: { allowPrivate: true },
    pollMs: 600_000,
    ...options,
  });
}

/**
 * Waits for `runId`'s delivery to settle, and `settleMs` more for a second attempt that should not come;
 * then the receiver got it once, and the delivery and its log say one attempt, delivered.
 */
async function sentOnce(
  db: Kysely<Database>,
  options: { runId: string; receiver: WebhookReceiver; settleMs: number },
): Promise<void> {
  const { runId, receiver } = options;
  const settled = await eventually(async () => {
    const row = await db.selectFrom("webhook_deliveries").selectAll().where("run_id", "=", runId)
      .executeTakeFirstOrThrow();
    return row.status === "pending" ? undefined : row;
  });
  await new Promise((resolve) => setTimeout(resolve, options.settleMs));
  assert.equal(receiver.requests.length, 1, "sent once");
  assert.equal(settled.status, "delivered");
  assert.equal(Number(settled.attempts), 1);
  const attempts = (await webhookViews(db, [runId])).get(runId)?.attempts ?? [];
  assert.deepEqual(attempts.map((a) => [a.attempt, a.status_code]), [[1, 200]]);
}

for (const engine of await engines()) {
  describe(`the delivery worker (${engine})`, () => {
    it("a wake-up from another store's process makes it claim at once, with no poll", async () => {
      const scratch = await openTestStore(engine);
      const other = await openStore(scratch.dataDir, { databaseUrl: scratch.databaseUrl, migrate: false });
      const receiver = await startWebhookReceiver();
      const worker = startTestWorker(scratch.store.db, { wakeUps: scratch.store.notifier });
      try {
        await scratch.store.notifier.listening();
        // Let the worker's one poll at start find the outbox empty.
        await new Promise((resolve) => setTimeout(resolve, 500));
        await other.db.transaction().execute(async (trx) => {
          await enqueueDelivery(trx, { runId: "run_woken", endpoint: receiver.url, body: "{}", sealedSecret: null });
          await other.notifier.notify("runplane_deliveries", "run_woken", { db: trx });
        });
        await receiver.waitFor(1);
        assert.equal(receiver.requests[0].headers["x-request-id"], "run_woken");
      } finally {
        await worker.stop();
        await receiver.close();
        await other.close();
        await scratch.close();
      }
    });

    it("works through a backlog bigger than one claim without waiting for the next poll", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      const receiver = await startWebhookReceiver();
      // A backlog, as after a restart or a receiver outage: nothing wakes the worker for these.
      const count = 300;
      await store.db.transaction().execute(async (trx) => {
        for (let i = 0; i < count; i++) {
          await enqueueDelivery(trx, {
            runId: `run_${String(i).padStart(26, "0")}`,
            endpoint: receiver.url,
            body: `{"n":${i}}`,
            sealedSecret: null,
          });
        }
      });
      const worker = startTestWorker(store.db, { maxInFlight: 16 });
      try {
        await receiver.waitFor(count);
        await eventually(
          async () => {
            const { n } = await store.db.selectFrom("webhook_deliveries").select((eb) =>
              eb.fn.countAll<number>().as("n")
            )
              .where("status", "!=", "delivered").executeTakeFirstOrThrow();
            return Number(n) === 0 ? true : undefined;
          },
          20_000,
          "every delivery to be recorded delivered",
        );
        assert.equal(
          new Set(receiver.requests.map((r) => r.body.toString())).size,
          count,
          "each delivery is sent once",
        );
      } finally {
        await worker.stop();
        await receiver.close();
        await scratch.close();
      }
    });

    it("sends a sync run's delivery handed over by the run's final write, with no claim and no wake", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      const receiver = await startWebhookReceiver();
      const secrets = createSecretBox(randomBytes(32));
      const logger = createLogger({ level: "silent" });
      // Only the hand-off can bring the delivery: nothing wakes the worker.
      const worker = startTestWorker(store.db, { secrets, logger });
      const runs = createRunService({
        db: store.db,
        secrets,
        logger,
        config: { resultTtlMs: 3_600_000, runLeaseMs: 30_000, webhookAllowPrivate: true },
        onDeliveries: () => {},
        deliveryHandOff: worker.handOff,
      });
      try {
        await ensureProject(store.db, "p-handoff");
        const submission = await runs.submit({
          projectId: "p-handoff",
          app: "hello",
          functionName: "run",
          mode: "sync",
          input: {},
          webhook: { endpoint: receiver.url, secret: "handoff-secret" },
        });
        assert.equal(submission.kind, "live");
        if (submission.kind !== "live") return;
        await submission.run.succeed({ ok: true });
        await receiver.waitFor(1, 10_000);
        const body = JSON.parse(receiver.requests[0].body.toString());
        assert.equal(body.run_id, submission.run.runId);
        assert.deepEqual(body.result, { ok: true });
        assert.match(
          String(receiver.requests[0].headers["x-runplane-webhook-signature"]),
          /^v1,[0-9a-f]{64}$/,
          "the delivery is signed",
        );
        const row = await eventually(
          async () => {
            const found = await store.db.selectFrom("webhook_deliveries").selectAll().where(
              "run_id",
              "=",
              submission.run.runId,
            ).executeTakeFirst();
            return found?.status === "delivered" ? found : undefined;
          },
          10_000,
          "the attempt to be recorded",
        );
        assert.equal(row.lease_owner, null, "a settled delivery holds no lease");
        // Kept sealed for a redelivery until the run's result expires (redelivery_test.ts), never in clear.
        assert.match(row.secret ?? "", /^v1\./, "a settled delivery keeps its secret sealed");
        assert.ok(!row.secret!.includes("handoff-secret"));
      } finally {
        await runs.stop();
        await worker.stop();
        await receiver.close();
        await scratch.close();
      }
    });

    it("bounds the hand-off queue: past it, deliveries are left to the outbox", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      const receiver = await startWebhookReceiver(() => "hang");
      const other = await startWebhookReceiver(() => "hang");
      const worker = startTestWorker(store.db, { timeoutMs: 60_000, maxInFlight: 1 });
      let taken = 0;
      async function handOffUntilRefused(url: string): Promise<number> {
        let count = 0;
        for (; count < 100; count++, taken++) {
          const now = Date.now();
          const lease = worker.handOff.lease(now, url);
          if (!lease) break;
          const runId = `run_${String(taken).padStart(26, "0")}`;
          const delivery = { runId, endpoint: url, body: `{"n":${taken}}`, sealedSecret: null };
          assert.ok(await enqueueDelivery(store.db, delivery, { now, lease }));
          worker.handOff.take([{
            run_id: runId,
            endpoint: url,
            body: delivery.body,
            secret: null,
            attempts: 0,
            created_at: now,
          }]);
        }
        return count;
      }
      try {
        // One attempt hangs in the window and one waits behind it: with a window of one, a destination
        // may have one attempt in flight and one waiting.
        assert.equal(await handOffUntilRefused(receiver.url), 2);
        // Another destination fills the queue up to its own bound (two per window slot).
        assert.equal(await handOffUntilRefused(other.url), 1);
        await receiver.waitFor(1, 10_000);
        assert.equal(receiver.requests.length, 1);
        assert.equal(other.requests.length, 0);
      } finally {
        await worker.stop();
        await receiver.close();
        await other.close();
        await scratch.close();
      }
    });

    it("a delivery whose last attempt was cut off by a crash ends failed, unsent, that attempt's outcome unknown", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      const receiver = await startWebhookReceiver();
      const runId = `run_${"c".repeat(26)}`;
      // What a process killed during the third attempt leaves: two 404s, a third started, its lease over.
      await enqueueDelivery(store.db, { runId, endpoint: receiver.url, body: "{}", sealedSecret: null }, {
        now: Date.now() - 60_000,
      });
      const at = Date.now() - 30_000;
      await recordAttempts(
        store.db,
        [1, 2].map((attempt) => ({
          runId,
          attempt,
          at,
          durationMs: 1,
          outcome: { statusCode: 404 },
          verdict: "retry" as const,
          nextAttemptAt: at,
          maxAttempts: MAX_ATTEMPTS,
        })),
      );
      await recordAttemptStarts(store.db, [{ runId, attempt: 3, at }]);
      const worker = startTestWorker(store.db);
      try {
        const delivery = await eventually(async () => {
          const row = await store.db.selectFrom("webhook_deliveries").selectAll().where("run_id", "=", runId)
            .executeTakeFirstOrThrow();
          return row.status === "pending" ? undefined : row;
        });
        assert.equal(delivery.status, "failed");
        assert.equal(Number(delivery.attempts), 3);
        const views = await webhookViews(store.db, [runId]);
        const attempts = views.get(runId)?.attempts ?? [];
        assert.deepEqual(attempts.map((a) => a.attempt), [1, 2, 3]);
        assert.equal(attempts[2].error, OUTCOME_UNKNOWN);
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.equal(receiver.requests.length, 0, "no fourth attempt is sent");
      } finally {
        await worker.stop();
        await receiver.close();
        await scratch.close();
      }
    });

    it("a slow receiver's postponed deliveries are put back in line when it answers, not after the timeout", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      // Slower than the worker's "slow" threshold (500 ms of silence while full), but alive.
      const slow = await startWebhookReceiver(() => ({ status: 200, afterMs: 1200 }));
      await store.db.transaction().execute(async (trx) => {
        for (let i = 0; i < 9; i++) {
          await enqueueDelivery(trx, { runId: `run_slow_${i}`, endpoint: slow.url, body: "{}", sealedSecret: null });
        }
      });
      // Postponed deliveries would wait out this timeout (60 s) if its answers did not bring them back.
      const worker = startTestWorker(store.db, { maxInFlight: 8, perDestination: 3, timeoutMs: 60_000, pollMs: 100 });
      try {
        await slow.waitFor(9, 30_000);
        const delivered = await eventually(async () => {
          const rows = await store.db.selectFrom("webhook_deliveries").select("status")
            .where("endpoint", "=", slow.url).execute();
          return rows.every((r) => r.status === "delivered") ? rows : undefined;
        });
        assert.equal(delivered.length, 9);
      } finally {
        await worker.stop();
        await slow.close();
        await scratch.close();
      }
    });

    it("a receiver that hangs holds at most perDestination attempts; the other destination's deliveries go on", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      const hanging = await startWebhookReceiver(() => "hang");
      const fast = await startWebhookReceiver();
      // The hanging receiver's deliveries are older, so a plain oldest-first window would fill with them.
      await store.db.transaction().execute(async (trx) => {
        for (let i = 0; i < 30; i++) {
          await enqueueDelivery(trx, { runId: `run_hang_${i}`, endpoint: hanging.url, body: "{}", sealedSecret: null });
        }
        for (let i = 0; i < 40; i++) {
          await enqueueDelivery(trx, { runId: `run_fast_${i}`, endpoint: fast.url, body: "{}", sealedSecret: null });
        }
      });
      // A long timeout: no attempt at the hanging receiver ends while the test runs.
      const worker = startTestWorker(store.db, { maxInFlight: 8, perDestination: 3, timeoutMs: 60_000, pollMs: 100 });
      try {
        await fast.waitFor(40);
        assert.equal(hanging.requests.length, 3, "the hanging receiver got exactly perDestination attempts");
        const hangingRows = await store.db.selectFrom("webhook_deliveries").select(["run_id", "attempts", "status"])
          .where("endpoint", "=", hanging.url).execute();
        assert.ok(hangingRows.every((r) => r.status === "pending"));
        const attempted = await store.db.selectFrom("webhook_attempts").select("run_id")
          .where("run_id", "like", "run_hang_%").execute();
        assert.equal(attempted.length, 3, "deliveries put back for a busy destination count no attempt");
      } finally {
        await worker.stop();
        await hanging.close();
        await fast.close();
        await scratch.close();
      }
    });

    it("a delivery whose lease runs out while its attempt is in flight is not claimed again by its own worker: sent once, one attempt listed", async () => {
      const scratch = await openTestStore(engine);
      const { store } = scratch;
      // A slow receiver: the attempt is in flight while the worker's clock passes the delivery's lease.
      const receiver = await startWebhookReceiver(() => ({ status: 200, afterMs: 1_500 }));
      let skewMs = 0;
      const worker = startTestWorker(store.db, { now: () => Date.now() + skewMs });
      const runId = "run_in_flight_lease";
      try {
        await enqueueDelivery(store.db, { runId, endpoint: receiver.url, body: "{}", sealedSecret: null });
        worker.wake();
        await receiver.waitFor(1);
        // What an outage or a stall longer than the lease leaves: the worker's next claim finds the lease over.
        skewMs = 10 * 60_000;
        worker.wake();
        await sentOnce(store.db, { runId, receiver, settleMs: 1_000 });
      } finally {
        await worker.stop();
        await receiver.close();
        await scratch.close();
      }
    });

    if (engine === "postgres") {
      it("a delivery whose attempt's outcome waits on a lock past its lease is not sent again once the outcome is written", async () => {
        const scratch = await openTestStore(engine);
        const { store } = scratch;
        const receiver = await startWebhookReceiver(() => ({ status: 200, afterMs: 500 }));
        let skewMs = 0;
        const worker = startTestWorker(store.db, { now: () => Date.now() + skewMs });
        const locker = new pg.Client({ connectionString: scratch.databaseUrl! });
        const runId = "run_outcome_locked";
        try {
          await locker.connect();
          await enqueueDelivery(store.db, { runId, endpoint: receiver.url, body: "{}", sealedSecret: null });
          worker.wake();
          await receiver.waitFor(1);
          // The attempt was counted before it was sent; its outcome now waits on the attempts' table.
          await locker.query("begin");
          await locker.query(`lock table "webhook_attempts" in access exclusive mode`);
          await eventually(
            async () => {
              const { rows } = await sql<{ query: string }>`select "query" from pg_stat_activity
              where "datname" = current_database() and "wait_event_type" = 'Lock'`.execute(store.db);
              return rows.some((row) => /insert into "webhook_attempts"/.test(row.query)) || undefined;
            },
            20_000,
            "the outcome to wait on the lock",
          );
          skewMs = 10 * 60_000;
          worker.wake();
          await new Promise((resolve) => setTimeout(resolve, 500));
          await locker.query("commit");
          await sentOnce(store.db, { runId, receiver, settleMs: 1_500 });
        } finally {
          await locker.end();
          await worker.stop();
          await receiver.close();
          await scratch.close();
        }
      });
    }
  });
}
