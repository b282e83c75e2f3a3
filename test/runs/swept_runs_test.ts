/**
 * The record tells the truth when a run's owner was cut off from the store longer than its lease:
 * another process's stale-lease sweep ends the run `failure`/`interrupted` (a guess), and the owner's
 * true end, written once the store answers it again, replaces the guess — a sync call's record through
 * the write-behind, an async run's through the leased batch — with its webhook: the guess's delivery is
 * replaced when it was not sent yet, and followed by the truth when it was. And a process that regains
 * the store after an outage waits one lease before it sweeps, so that live owners renew first.
 *
 * Two run services share one store (SQLite file or PostgreSQL database), as two processes do; the
 * owner's lease is made stale with SQL, which is what an outage longer than the lease leaves behind.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { sql } from "kysely";
import { verifyWebhook } from "../../client/webhook_verifier.ts";
import { createLogger } from "../../server/log.ts";
import { createRunService, type LiveRun, type RunService } from "../../server/runs/mod.ts";
import type { RunExecutor } from "../../server/runs/executor.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { ensureProject } from "../../server/store/mod.ts";
import { type DeliveryWorker, startDeliveryWorker } from "../../server/webhooks/mod.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { engines, openTestStore } from "../_helpers/postgres.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

const PROJECT = "p-swept";
const SECRET = "whsec-swept";
const HOUR = 3_600_000;

/**
 * Functions run in this process, as a runtime would run them: `hold` returns `{answer: 42}` once the
 * test lets it go (`release()`).
 */
function heldExecutor(): RunExecutor & { release(): void; started: Promise<void> } {
  let running = 0;
  let release = () => {};
  const released = new Promise<void>((resolve) => (release = resolve));
  let started = () => {};
  const startedPromise = new Promise<void>((resolve) => (started = resolve));
  return {
    freeSlots: () => 4 - running,
    gracePeriodMs: () => undefined,
    async execute() {
      running++;
      const at = performance.now();
      started();
      try {
        await released;
        return { kind: "result", result: { answer: 42 }, runTimeMs: performance.now() - at };
      } finally {
        running--;
      }
    },
    release,
    started: startedPromise,
  };
}

for (const engine of await engines()) {
  describe(`a run whose lease lapsed while its owner was cut off (${engine})`, () => {
    /** A store, a secret box and a receiver shared by the test's services (its "processes"). */
    async function setUp(defer: (step: () => unknown) => void, answer?: Parameters<typeof startWebhookReceiver>[0]) {
      const scratch = await openTestStore(engine);
      defer(() => scratch.close());
      const { db } = scratch.store;
      await ensureProject(db, PROJECT);
      const secrets = createSecretBox(randomBytes(32));
      const receiver = await startWebhookReceiver(answer);
      defer(() => receiver.close());
      const logs: Array<Record<string, unknown>> = [];
      const logger = createLogger({
        level: "info",
        destination: new Writable({
          write(chunk, _encoding, done) {
            for (const line of String(chunk).split("\n")) if (line) logs.push(JSON.parse(line));
            done();
          },
        }),
      });
      /** A delivery worker of `owner`'s process (started when the test wants deliveries made). */
      function worker(owner: string, pollMs = 100): DeliveryWorker {
        const started = startDeliveryWorker({
          db,
          secrets,
          logger,
          headerVendor: "Runplane",
          timeoutMs: 5_000,
          retryDelayMs: 200,
          guard: { allowPrivate: true },
          owner,
          pollMs,
        });
        defer(() => started.stop());
        return started;
      }
      /** A run service of a process whose lease owner is `owner`; its deliveries go to `workers.get(owner)`. */
      const workers = new Map<string, DeliveryWorker>();
      function service(owner: string, options: { leaseMs?: number; executor?: RunExecutor } = {}): RunService {
        const runs = createRunService({
          db,
          secrets,
          logger: logger.child({ process: owner }),
          owner,
          executor: options.executor,
          pollMs: 50,
          config: { resultTtlMs: HOUR, runLeaseMs: options.leaseMs ?? HOUR, webhookAllowPrivate: true },
          onDeliveries: () => workers.get(owner)?.wake(),
          deliveryHandOff: {
            lease: (now, endpoint) => workers.get(owner)?.handOff.lease(now, endpoint) ?? null,
            take: (deliveries) => workers.get(owner)!.handOff.take(deliveries),
          },
        });
        defer(() => runs.stop());
        return runs;
      }
      async function liveCall(runs: RunService, fn = "answer"): Promise<LiveRun> {
        const submission = await runs.submit({
          projectId: PROJECT,
          app: "a",
          functionName: fn,
          mode: "sync",
          input: {},
          webhook: { endpoint: receiver.url, secret: SECRET },
        });
        assert.equal(submission.kind, "live");
        await runs.flush();
        return (submission as { run: LiveRun }).run;
      }
      const stored = (runId: string) =>
        db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirst();
      const delivery = (runId: string) =>
        db.selectFrom("webhook_deliveries").selectAll().where("run_id", "=", runId).executeTakeFirst();
      /** What an outage longer than the lease leaves: the owner could not renew, its lease ran out. */
      async function lapse(runId: string): Promise<void> {
        await db.updateTable("runs").set({ lease_expires_at: 1 }).where("run_id", "=", runId).execute();
      }
      async function untilSwept(runId: string) {
        return await eventually(
          async () => {
            const row = await stored(runId);
            return row?.status === "failure" ? row : undefined;
          },
          20_000,
          `${runId} to be swept`,
        );
      }
      /** The webhook bodies `runId`'s receiver got, each checked for its signature. */
      async function received(runId: string): Promise<Array<{ status: string; error: { type: string } | null }>> {
        const mine = receiver.requests.filter((r) => r.headers["x-request-id"] === runId);
        const bodies = [];
        for (const request of mine) {
          const verified = await verifyWebhook({ secret: SECRET, headers: request.headers, body: request.body });
          assert.ok(verified.valid, `a delivery of ${runId} does not verify: ${JSON.stringify(verified)}`);
          bodies.push(JSON.parse(request.body.toString()) as { status: string; error: { type: string } | null });
        }
        return bodies;
      }
      return { db, logs, receiver, worker, workers, service, liveCall, stored, delivery, lapse, untilSwept, received };
    }

    it("a sync call answered after its lease lapsed is recorded as answered; the sweep's undelivered webhook is replaced by the true one", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const a = t.service("owner-a");
      const run = await t.liveCall(a);
      await t.lapse(run.runId);
      // Another process's upkeep runs at its start: it finds the lease run out and ends the run.
      t.service("owner-b");
      const swept = await t.untilSwept(run.runId);
      assert.equal(swept.error_type, "interrupted");
      assert.equal((await t.delivery(run.runId))?.status, "pending");
      // The owner reaches the store again: its caller got the result, so the record says so.
      await run.succeed({ answer: 42 });
      const row = await t.stored(run.runId);
      assert.equal(row?.status, "success");
      assert.equal(row?.result_json, '{"answer":42}');
      assert.equal(row?.error_type, null);
      assert.equal(row?.swept_owner, null);
      t.workers.set("owner-a", t.worker("owner-a"));
      await t.receiver.waitFor(1);
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.deepEqual((await t.received(run.runId)).map((b) => b.status), ["success"], "only the truth was sent");
    });

    it("a sync call answered after its lease lapsed: when the sweep's webhook went out already, the true one follows it, signed", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const a = t.service("owner-a");
      t.workers.set("owner-b", t.worker("owner-b"));
      const run = await t.liveCall(a);
      await t.lapse(run.runId);
      t.service("owner-b");
      await t.untilSwept(run.runId);
      await eventually(async () => (await t.delivery(run.runId))?.status === "delivered" || undefined, 20_000);
      t.workers.set("owner-a", t.worker("owner-a"));
      await run.succeed({ answer: 42 });
      assert.equal((await t.stored(run.runId))?.status, "success");
      await t.receiver.waitFor(2);
      const bodies = await t.received(run.runId);
      assert.deepEqual(bodies.map((b) => [b.status, b.error?.type ?? null]), [["failure", "interrupted"], [
        "success",
        null,
      ]]);
      const settled = await eventually(async () => {
        const row = await t.delivery(run.runId);
        return row?.status === "delivered" ? row : undefined;
      }, 20_000);
      assert.equal(Number(settled.attempts), 2);
    });

    it("a sync call answered after its lease lapsed: when the sweep's webhook is in flight, its outcome does not settle the true one, which follows", async () => {
      const defer = deferCleanup();
      // The receiver holds the first request a while: the guess's attempt is in flight when the truth comes.
      const t = await setUp(defer, (n) => (n === 1 ? { status: 200, afterMs: 1_500 } : 200));
      const a = t.service("owner-a");
      // B's worker claims once at its start and when woken: nothing claims the replaced delivery before
      // the guess's attempt ends.
      const run = await t.liveCall(a);
      await t.lapse(run.runId);
      t.workers.set("owner-b", t.worker("owner-b", 600_000));
      t.service("owner-b");
      await t.untilSwept(run.runId);
      await t.receiver.waitFor(1);
      await run.succeed({ answer: 42 });
      // The guess's attempt ends (200) and is recorded; the delivery it held was replaced meanwhile.
      await eventually(
        async () => {
          const attempts = await t.db.selectFrom("webhook_attempts").select("status_code").where(
            "run_id",
            "=",
            run.runId,
          )
            .execute();
          return attempts.some((attempt) => attempt.status_code === 200) || undefined;
        },
        20_000,
        "the guess's attempt to be recorded",
      );
      assert.equal((await t.delivery(run.runId))?.status, "pending", "the true delivery is still to be sent");
      t.workers.set("owner-a", t.worker("owner-a"));
      await t.receiver.waitFor(2);
      assert.deepEqual((await t.received(run.runId)).map((b) => b.status), ["failure", "success"]);
    });

    it("a stream's end after its lease lapsed replaces the sweep's guess too", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const a = t.service("owner-a");
      const stream = await t.liveCall(a, "tokens");
      stream.streaming();
      stream.item("one");
      await t.lapse(stream.runId);
      t.service("owner-b");
      await t.untilSwept(stream.runId);
      await stream.succeed();
      const row = await t.stored(stream.runId);
      assert.deepEqual([row?.status, row?.mode, row?.result_json], ["success", "stream", '["one"]']);
    });

    it("an async run that finished after its lease lapsed is recorded with its result (the leased batch), its webhook the true one", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const executor = heldExecutor();
      const a = t.service("owner-a", { executor });
      const accepted = await a.submit({
        projectId: PROJECT,
        app: "a",
        functionName: "hold",
        mode: "async",
        input: {},
        webhook: { endpoint: t.receiver.url, secret: SECRET },
      });
      assert.equal(accepted.kind, "accepted");
      const runId = (accepted as { runId: string }).runId;
      await executor.started;
      await t.lapse(runId);
      t.service("owner-b");
      const swept = await t.untilSwept(runId);
      assert.equal(swept.error_type, "interrupted");
      executor.release();
      const row = await eventually(
        async () => {
          const found = await t.stored(runId);
          return found?.status === "success" ? found : undefined;
        },
        20_000,
        "the true end to replace the guess",
      );
      assert.equal(row.result_json, '{"answer":42}');
      assert.equal(row.error_type, null);
      assert.ok(
        !t.logs.some((l) => l.run_id === runId && /ended elsewhere/.test(String(l.msg))),
        "the outcome was not dropped",
      );
      t.workers.set("owner-a", t.worker("owner-a"));
      await t.receiver.waitFor(1);
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.deepEqual((await t.received(runId)).map((b) => b.status), ["success"]);
    });

    it("a process that reaches the store again after an outage waits one lease before it ends runs whose lease ran out", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const leaseMs = 9_000;
      const b = t.service("owner-b", { leaseMs });
      const own = await t.liveCall(b, "own");
      const orphan = await t.liveCall(t.service("owner-a"), "orphan");
      // The store goes away (every statement on runs fails) while B's upkeep runs; meanwhile A's lease
      // runs out, as no owner can renew during an outage.
      await sql`alter table "runs" rename to "runs_away"`.execute(t.db);
      await eventually(
        async () => t.logs.some((l) => l.process === "owner-b" && l.msg === "run upkeep failed") || undefined,
        20_000,
        "B's upkeep to fail",
      );
      await sql`update "runs_away" set "lease_expires_at" = 1 where "run_id" = ${orphan.runId}`.execute(t.db);
      const { rows } = await sql<
        { lease_expires_at: number }
      >`select "lease_expires_at" from "runs_away" where "run_id" = ${own.runId}`
        .execute(t.db);
      const before = Number(rows[0].lease_expires_at);
      await sql`alter table "runs_away" rename to "runs"`.execute(t.db);
      // B's next upkeep succeeds (it renews its own run's lease)…
      await eventually(
        async () => Number((await t.stored(own.runId))?.lease_expires_at) > before || undefined,
        20_000,
        "B to renew its lease",
      );
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      // …and, with the store back less than a lease ago, leaves A's run alone (A could be renewing it).
      assert.equal((await t.stored(orphan.runId))?.status, "running", "not swept right after the outage");
      // A never comes back: one lease later its run is ended.
      const swept = await eventually(
        async () => {
          const row = await t.stored(orphan.runId);
          return row?.status === "failure" ? row : undefined;
        },
        60_000,
        "the orphan to be swept after a lease",
      );
      assert.equal(swept.error_type, "interrupted");
      assert.equal(swept.swept_owner, "owner-a");
    });
  });
}
