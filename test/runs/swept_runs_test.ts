/**
 * A run ends once when its owner was cut off from the store longer than its lease: another process's
 * lease rescue ends the run `failure`/`interrupted` and sends that webhook, and the owner, once the store
 * answers it again, finds the run ended: it records nothing (a sync call's record through the
 * write-behind, an async run's through the leased batch), sends no webhook, tells a waiting caller 409
 * `interrupted`, and logs what it dropped. The receiver gets one verdict, and the delivery log lists
 * every attempt it got. A sync call whose function streamed is rescued as a stream. And a process that
 * regains the store after an outage waits one lease before it rescues, so that live owners renew first.
 *
 * Two run services share one store (SQLite file or PostgreSQL database), as two processes do; the
 * owner's lease is made stale with SQL, which is what an outage longer than the lease leaves behind
 * (`run_ends_once_test.ts` blocks a holder with a real lock instead).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { type Kysely, sql } from "kysely";
import pg from "pg";
import { verifyWebhook } from "../../client/webhook_verifier.ts";
import { createLogger } from "../../server/log.ts";
import { isProblemError } from "../../server/problems/mod.ts";
import { createRunService, type LiveRun, type RunService } from "../../server/runs/mod.ts";
import type { RunExecutor } from "../../server/runs/executor.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { type Database, ensureProject } from "../../server/store/mod.ts";
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
      // A ticket already expired: the first upkeep of the first service made deletes it (see `lapse`).
      const sentinel = randomBytes(16).toString("hex");
      await db.insertInto("websocket_tickets").values({
        digest: sentinel,
        project_id: PROJECT,
        app_id: "a",
        expires_at: 1,
      })
        .execute();
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
      function service(
        owner: string,
        options: { leaseMs?: number; executor?: RunExecutor; ownersDir?: string } = {},
      ): RunService {
        const runs = createRunService({
          db,
          ownersDir: options.ownersDir,
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
      /** Submits an async call of `hold` with a webhook to `runs`; answers its run id. */
      async function asyncCall(runs: RunService): Promise<string> {
        const accepted = await runs.submit({
          projectId: PROJECT,
          app: "a",
          functionName: "hold",
          mode: "async",
          input: {},
          webhook: { endpoint: receiver.url, secret: SECRET },
        });
        assert.equal(accepted.kind, "accepted");
        return (accepted as { runId: string }).runId;
      }
      const stored = (runId: string) =>
        db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirst();
      const delivery = (runId: string) =>
        db.selectFrom("webhook_deliveries").selectAll().where("run_id", "=", runId).executeTakeFirst();
      /**
       * What an outage longer than the lease leaves: the owner could not renew, its lease ran out. The
       * owner (the first service made) runs its upkeep once at its start, renewing its leases first and
       * deleting expired tickets last; nothing ordered that renewal before this update, and one after it
       * undoes it until the next (a third of an hour later): CI once timed out waiting for the sweep. So
       * the lease is made stale once that first upkeep is done.
       */
      async function lapse(runId: string): Promise<void> {
        await eventually(
          async () =>
            (await db.selectFrom("websocket_tickets").select("digest").where("digest", "=", sentinel)
                .executeTakeFirst()) === undefined || undefined,
          20_000,
          "the owner's first upkeep",
        );
        await db.updateTable("runs").set({ lease_expires_at: 1 }).where("run_id", "=", runId).execute();
      }
      /** The run's row once it is swept; a timeout says what the services logged at warn and above. */
      async function untilSwept(runId: string) {
        try {
          return await eventually(
            async () => {
              const row = await stored(runId);
              return row?.status === "failure" ? row : undefined;
            },
            20_000,
            `${runId} to be swept`,
          );
        } catch (error) {
          const warnings = logs.filter((l) => Number(l.level) >= 40).map((l) => JSON.stringify(l));
          (error as Error).message += `; the services logged: ${warnings.join("\n") || "no warnings"}`;
          throw error;
        }
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
      /** What the owner logged of the outcome it dropped for `runId`. */
      const dropped = (runId: string) =>
        logs.find((l) => l.run_id === runId && /ended elsewhere before it finished here/.test(String(l.msg)));
      /** The attempts the delivery log lists for `runId`. */
      const attempts = (runId: string) =>
        db.selectFrom("webhook_attempts").selectAll().where("run_id", "=", runId).orderBy("attempt").execute();
      return {
        db,
        databaseUrl: scratch.databaseUrl,
        logs,
        receiver,
        worker,
        workers,
        service,
        liveCall,
        asyncCall,
        stored,
        delivery,
        lapse,
        untilSwept,
        received,
        dropped,
        attempts,
      };
    }

    /** `promise` rejects with a 409 `interrupted` problem for `runId`. */
    async function rejectsInterrupted(promise: Promise<void>, runId: string): Promise<void> {
      await assert.rejects(promise, (error) => {
        assert.ok(isProblemError(error), String(error));
        assert.equal(error.kind, "interrupted");
        assert.equal(error.status, 409);
        assert.equal(error.options.runId, runId);
        return true;
      });
    }

    it("a sync call whose lease lapsed keeps the rescue's end: its holder records nothing, sends nothing, tells its caller 409 interrupted and logs what it dropped", async () => {
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
      const body = (await t.delivery(run.runId))?.body;
      // The owner reaches the store again with its result: the run had been ended, so the result is dropped.
      await rejectsInterrupted(run.succeed({ answer: 42 }), run.runId);
      const row = await t.stored(run.runId);
      assert.deepEqual([row?.status, row?.error_type, row?.result_json], ["failure", "interrupted", null]);
      assert.equal(row?.swept_owner, "owner-a");
      assert.equal((await t.delivery(run.runId))?.body, body, "the rescue's delivery is the one stored");
      const said = t.dropped(run.runId);
      assert.ok(said, "the holder says what it dropped");
      assert.deepEqual(
        [said.process, said.dropped_status, said.stored_status, said.stored_error_type, said.rescued_from],
        ["owner-a", "success", "failure", "interrupted", "owner-a"],
      );
      t.workers.set("owner-a", t.worker("owner-a"));
      t.workers.set("owner-b", t.worker("owner-b"));
      await t.receiver.waitFor(1);
      await new Promise((resolve) => setTimeout(resolve, 500));
      const bodies = await t.received(run.runId);
      assert.deepEqual(bodies.map((b) => [b.status, b.error?.type ?? null]), [["failure", "interrupted"]]);
      assert.equal((await t.attempts(run.runId)).length, bodies.length, "the delivery log lists what was sent");
    });

    it("a sync call whose lease lapsed: when the rescue's webhook went out already, nothing follows it", async () => {
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
      await rejectsInterrupted(run.succeed({ answer: 42 }), run.runId);
      assert.equal((await t.stored(run.runId))?.status, "failure");
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const bodies = await t.received(run.runId);
      assert.deepEqual(bodies.map((b) => [b.status, b.error?.type ?? null]), [["failure", "interrupted"]]);
      const settled = await t.delivery(run.runId);
      assert.equal(settled?.status, "delivered");
      assert.equal(Number(settled?.attempts), 1);
      assert.equal((await t.attempts(run.runId)).length, 1, "the delivery log lists the one attempt sent");
    });

    it("a sync call whose lease lapsed: when the rescue's webhook is in flight, its attempt settles it and nothing follows", async () => {
      const defer = deferCleanup();
      // The receiver holds the first request a while: the rescue's attempt is in flight when the holder comes back.
      const t = await setUp(defer, (n) => (n === 1 ? { status: 200, afterMs: 1_500 } : 200));
      const a = t.service("owner-a");
      const run = await t.liveCall(a);
      await t.lapse(run.runId);
      t.workers.set("owner-b", t.worker("owner-b", 600_000));
      t.service("owner-b");
      await t.untilSwept(run.runId);
      await t.receiver.waitFor(1);
      t.workers.set("owner-a", t.worker("owner-a"));
      await rejectsInterrupted(run.succeed({ answer: 42 }), run.runId);
      const settled = await eventually(
        async () => {
          const row = await t.delivery(run.runId);
          return row?.status === "delivered" ? row : undefined;
        },
        20_000,
        "the rescue's attempt to settle its delivery",
      );
      assert.equal(Number(settled.attempts), 1);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      assert.deepEqual((await t.received(run.runId)).map((b) => b.status), ["failure"]);
      const listed = await t.attempts(run.runId);
      assert.deepEqual(listed.map((attempt) => Number(attempt.status_code)), [200]);
    });

    it("a stream cut by its lease lapsing is rescued as a stream, and its end after that is dropped", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const a = t.service("owner-a");
      const stream = await t.liveCall(a, "tokens");
      // A sync call whose function turned out to stream: its stored running row says so.
      stream.streaming();
      stream.item("one");
      await a.flush();
      await t.lapse(stream.runId);
      t.service("owner-b");
      const swept = await t.untilSwept(stream.runId);
      assert.deepEqual([swept.status, swept.error_type, swept.mode], ["failure", "interrupted", "stream"]);
      await rejectsInterrupted(stream.succeed(), stream.runId);
      const row = await t.stored(stream.runId);
      assert.deepEqual([row?.status, row?.mode, row?.result_json], ["failure", "stream", null]);
      assert.equal(t.dropped(stream.runId)?.dropped_status, "success");
    });

    it("an async run that finished after its lease lapsed keeps the rescue's end; its outcome is dropped and logged, its webhook the rescue's alone", async () => {
      const defer = deferCleanup();
      const t = await setUp(defer);
      const executor = heldExecutor();
      const a = t.service("owner-a", { executor });
      const runId = await t.asyncCall(a);
      await executor.started;
      await t.lapse(runId);
      t.service("owner-b");
      const swept = await t.untilSwept(runId);
      assert.equal(swept.error_type, "interrupted");
      executor.release();
      await eventually(
        async () => t.logs.some((l) => l.run_id === runId && /ended elsewhere/.test(String(l.msg))) || undefined,
        20_000,
        "the holder to drop its outcome",
      );
      const row = await t.stored(runId);
      assert.deepEqual([row?.status, row?.error_type, row?.result_json], ["failure", "interrupted", null]);
      t.workers.set("owner-a", t.worker("owner-a"));
      t.workers.set("owner-b", t.worker("owner-b"));
      await t.receiver.waitFor(1);
      await new Promise((resolve) => setTimeout(resolve, 500));
      assert.deepEqual((await t.received(runId)).map((b) => b.status), ["failure"]);
      assert.equal((await t.attempts(runId)).length, 1);
    });

    it("an async run whose lease lapsed while this host sees its owner alive is left to it: the owner's end is the one stored and sent", async () => {
      // Two processes of one host share an owners folder: one cut off from the store (connections ran out)
      // is blocked, not gone, so the other's upkeep does not rescue its run (here both are this process).
      const defer = deferCleanup();
      const t = await setUp(defer);
      const parent = await mkdtemp(join(tmpdir(), "runplane-swept-"));
      defer(() => rm(parent, { recursive: true, force: true }));
      const ownersDir = join(parent, "owners");
      const executor = heldExecutor();
      const a = t.service("owner-a", { executor, ownersDir });
      const runId = await t.asyncCall(a);
      await executor.started;
      await t.lapse(runId);
      t.service("owner-b", { ownersDir, leaseMs: 600 });
      await new Promise((resolve) => setTimeout(resolve, 1_500)); // several of B's upkeeps (every 200 ms)
      assert.equal((await t.stored(runId))?.status, "running", "not rescued while its owner is alive");
      executor.release();
      const row = await eventually(
        async () => {
          const found = await t.stored(runId);
          return found?.status === "success" ? found : undefined;
        },
        20_000,
        "the owner's end to be stored",
      );
      assert.equal(row.swept_owner, null);
      t.workers.set("owner-a", t.worker("owner-a"));
      await t.receiver.waitFor(1);
      assert.deepEqual((await t.received(runId)).map((b) => b.status), ["success"]);
    });

    if (engine === "postgres") {
      /** Statements of the run services now waiting for a lock, as PostgreSQL shows them. */
      async function waitingOnLocks(db: Kysely<Database>): Promise<string[]> {
        const { rows } = await sql<{ query: string }>`select "query" from pg_stat_activity
          where "datname" = current_database() and "wait_event_type" = 'Lock'`.execute(db);
        return rows.map((row) => row.query);
      }

      /**
       * A store with a holder "owner-a" (lease 1.5 s) of a sync call with a webhook, and a test connection
       * that has begun a transaction and run `lock` in it: commit it to let go.
       */
      async function heldRun(defer: (step: () => unknown) => void, lock: (runId: string) => [string, unknown[]]) {
        const t = await setUp(defer);
        const leaseMs = 1_500;
        const a = t.service("owner-a", { leaseMs });
        t.workers.set("owner-a", t.worker("owner-a"));
        const run = await t.liveCall(a);
        const locker = new pg.Client({ connectionString: t.databaseUrl! });
        await locker.connect();
        defer(() => locker.end());
        await locker.query("begin");
        await locker.query(...lock(run.runId));
        return { t, leaseMs, run, locker };
      }

      it("a lock held on a sync run's row past its lease: the holder cannot renew, another process rescues the run, and the holder's end after it is dropped: one outcome stored, one verdict received, the delivery log as sent", async () => {
        // A test connection holds the run's row: the holder's renewals and writes of it wait (alive, only
        // blocked) while its function goes on. A table lock would make the rescue wait for it too, and the
        // holder's next renewal and the rescue would then race for the row; a row lock queues them in order.
        const { t, leaseMs, run, locker } = await heldRun(deferCleanup(), (runId) => [
          `select 1 from "runs" where "run_id" = $1 for update`,
          [runId],
        ]);
        await eventually(
          async () => (await waitingOnLocks(t.db)).some((q) => /set "lease_expires_at" =/.test(q)) || undefined,
          20_000,
          "the holder's renewal to wait on the lock",
        );
        // Past the lease it could not renew, another process's upkeep finds it run out and ends the run; its
        // end waits on the row behind the holder's renewal.
        await new Promise((resolve) => setTimeout(resolve, 2 * leaseMs));
        t.workers.set("owner-b", t.worker("owner-b"));
        t.service("owner-b", { leaseMs });
        await eventually(
          async () => (await waitingOnLocks(t.db)).some((q) => /^update "runs" set "status" =/.test(q)) || undefined,
          20_000,
          "the rescue to wait on the lock",
        );
        await locker.query("commit");
        const swept = await t.untilSwept(run.runId);
        assert.equal(swept.error_type, "interrupted");
        await t.receiver.waitFor(1);
        // The holder's function ends now, after the rescue's webhook went out: its outcome is dropped.
        await rejectsInterrupted(run.succeed({ answer: 42 }), run.runId);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        const row = await t.stored(run.runId);
        assert.deepEqual([row?.status, row?.error_type, row?.result_json], ["failure", "interrupted", null]);
        const bodies = await t.received(run.runId);
        assert.deepEqual(bodies.map((b) => [b.status, b.error?.type ?? null]), [["failure", "interrupted"]]);
        assert.equal((await t.attempts(run.runId)).length, bodies.length, "the delivery log lists what was sent");
        assert.equal(t.dropped(run.runId)?.dropped_status, "success");
      });

      it("a table lock held past a sync run's lease while the run ends and another process would rescue it: whichever end is first is the only one stored, sent and answered", async () => {
        const { t, leaseMs, run, locker } = await heldRun(deferCleanup(), () => [
          `lock table "runs" in access exclusive mode`,
          [],
        ]);
        t.workers.set("owner-b", t.worker("owner-b"));
        t.service("owner-b", { leaseMs });
        await new Promise((resolve) => setTimeout(resolve, 2 * leaseMs));
        // The function ends while the store refuses: its final write waits with everyone else's.
        const answered = run.succeed({ answer: 42 }).then(() => "success", (error: unknown) => {
          assert.ok(isProblemError(error) && error.kind === "interrupted", String(error));
          return "failure";
        });
        await new Promise((resolve) => setTimeout(resolve, 200));
        await locker.query("commit");
        const caller = await answered;
        const row = await eventually(async () => {
          const found = await t.stored(run.runId);
          return found && found.status !== "running" ? found : undefined;
        });
        assert.equal(row.status, caller, "the caller is answered what the record says");
        await t.receiver.waitFor(1);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
        const bodies = await t.received(run.runId);
        assert.deepEqual(bodies.map((b) => b.status), [row.status], "one verdict, the stored one");
        assert.equal((await t.attempts(run.runId)).length, 1, "the delivery log lists what was sent");
      });
    }

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
