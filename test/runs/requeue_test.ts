/**
 * An accepted async run ends `failure` only for its own reasons (issue 44). A passing reason of the
 * platform's met before its function started — no replica may run it here now, the store refused — puts
 * it back on the queue with its place kept, and it is tried again until its app can run it or its
 * deadline (the app's `response_grace_period` after it was accepted) passes; then it fails with that
 * reason's type, never `upstream_error`. Its own failure, an unknown function, or a refusal after a
 * replica took the call, ends it at once. On both engines: a run service with a scripted executor.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { ProblemError } from "../../server/problems/mod.ts";
import { createRunService, type Run, type RunService } from "../../server/runs/mod.ts";
import type { ExecutedCall, ExecuteRequest, RunExecutor } from "../../server/runs/executor.ts";
import { putBackOnQueue } from "../../server/runs/_queued_run.ts";
import { NoSeatError, RunFailure } from "../../server/runtime/mod.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { ensureProject } from "../../server/store/mod.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { engines, openTestStore } from "../_helpers/postgres.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const PROJECT = "p-requeue";
const HOUR = 3_600_000;

/** The store refusing a connection, as `pg` throws it. */
function tooManyClients(): Error {
  return Object.assign(new Error("sorry, too many clients already"), { code: "53300" });
}

/** What the scripted executor does with one call: throw, or answer after `ms`. */
type Step = { throws: (request: ExecuteRequest) => unknown } | { answerAfterMs: number };

/**
 * An executor of one slot (`freeSlots` counts its calls in flight) whose `n`-th call of run `r` does
 * what `script(runId, n)` says; every call is logged in order.
 */
function scriptedExecutor(script: (runId: string, n: number) => Step, graceMs?: number) {
  const calls: Array<{ runId: string; ok: boolean }> = [];
  const counts = new Map<string, number>();
  let running = 0;
  const executor: RunExecutor = {
    freeSlots: () => 1 - running,
    gracePeriodMs: () => graceMs,
    async execute(request): Promise<ExecutedCall> {
      running++;
      const n = (counts.get(request.runId) ?? 0) + 1;
      counts.set(request.runId, n);
      try {
        const step = script(request.runId, n);
        if ("throws" in step) {
          calls.push({ runId: request.runId, ok: false });
          throw step.throws(request);
        }
        await new Promise((resolve) => setTimeout(resolve, step.answerAfterMs));
        calls.push({ runId: request.runId, ok: true });
        return { kind: "result", result: { ran: request.runId }, runTimeMs: step.answerAfterMs };
      } finally {
        running--;
      }
    },
  };
  return { executor, calls, count: (runId: string) => counts.get(runId) ?? 0 };
}

for (const engine of await engines()) {
  describe(`an async run turned away before its function started (${engine})`, () => {
    async function setUp(defer: (step: () => unknown) => void, executor: RunExecutor) {
      const scratch = await openTestStore(engine);
      defer(() => scratch.close());
      const { db } = scratch.store;
      await ensureProject(db, PROJECT);
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
      const runs: RunService = createRunService({
        db,
        secrets: createSecretBox(randomBytes(32)),
        logger,
        owner: "owner-a",
        executor,
        pollMs: 50,
        config: { resultTtlMs: HOUR, runLeaseMs: HOUR, webhookAllowPrivate: true },
      });
      defer(() => runs.stop());
      async function submit(functionName = "f"): Promise<string> {
        const submission = await runs.submit({ projectId: PROJECT, app: "a", functionName, mode: "async", input: {} });
        assert.equal(submission.kind, "accepted");
        return (submission as { runId: string }).runId;
      }
      async function ended(runId: string): Promise<Run> {
        return await eventually(
          async () => {
            const run = await runs.getRun({ projectId: PROJECT, appId: "a", runId });
            return ["success", "failure", "cancelled"].includes(run.status) ? run : undefined;
          },
          30_000,
          `${runId} to end`,
        );
      }
      const putBack = (runId: string) =>
        logs.filter((line) => line.run_id === runId && String(line.msg).includes("put back on the queue"));
      return { db, runs, submit, ended, putBack };
    }

    it("no replica may run it here now: put back with its place kept, it runs once one may", async () => {
      const defer = deferCleanup();
      let first = "";
      const x = scriptedExecutor((runId, n) =>
        runId === first && n === 1 ? { throws: () => new NoSeatError(`${PROJECT}/a`) } : { answerAfterMs: 50 }
      );
      const t = await setUp(defer, x.executor);
      first = await t.submit();
      const later: string[] = [];
      for (let i = 0; i < 12; i++) later.push(await t.submit());
      const run = await t.ended(first);
      assert.equal(run.status, "success", JSON.stringify(run.error));
      assert.deepEqual(run.result, { ran: first });
      assert.equal(x.count(first), 2, "turned away once, then run once");
      for (const runId of later) assert.equal((await t.ended(runId)).status, "success");
      // Its place kept: run again ahead of the runs queued after it (at most one was claimed while it
      // was being put back), not behind them.
      const ranAt = x.calls.findIndex((call) => call.runId === first && call.ok);
      assert.ok(ranAt <= 2, `run again at ${ranAt}: ${JSON.stringify(x.calls.map((c) => later.indexOf(c.runId)))}`);
      assert.equal(t.putBack(first).length, 1);
      assert.equal(t.putBack(first)[0].reason, "service_unavailable");
      const stored = await t.db.selectFrom("runs").selectAll().where("run_id", "=", first).executeTakeFirstOrThrow();
      assert.ok(Number(stored.queue_time_ms) >= 0 && stored.started_at !== null && stored.error_type === null);
    });

    it("the store refused ('too many clients') before its function started: put back, it runs once the store answers", async () => {
      const defer = deferCleanup();
      const x = scriptedExecutor((_runId, n) => n <= 2 ? { throws: tooManyClients } : { answerAfterMs: 10 });
      const t = await setUp(defer, x.executor);
      const runId = await t.submit();
      const run = await t.ended(runId);
      assert.equal(run.status, "success", JSON.stringify(run.error));
      assert.equal(x.count(runId), 3);
      assert.deepEqual(t.putBack(runId).map((line) => line.reason), ["store_unavailable", "store_unavailable"]);
    });

    it("past its deadline (response_grace_period after it was accepted) it fails with the platform's reason, not upstream_error", async () => {
      const defer = deferCleanup();
      const x = scriptedExecutor(() => ({ throws: () => new NoSeatError(`${PROJECT}/a`) }), 1_500);
      const t = await setUp(defer, x.executor);
      const runId = await t.submit();
      const run = await t.ended(runId);
      assert.equal(run.status, "failure");
      assert.equal(run.error?.type, "service_unavailable");
      assert.match(run.error?.message ?? "", /response_grace_period \(2 s after it was accepted\).*No replica of/);
      assert.ok(x.count(runId) >= 2, `tried ${x.count(runId)} times`);
    });

    it("the store refusing until its deadline ends it store_unavailable", async () => {
      const defer = deferCleanup();
      const x = scriptedExecutor(() => ({ throws: tooManyClients }), 1_500);
      const t = await setUp(defer, x.executor);
      const runId = await t.submit();
      const run = await t.ended(runId);
      assert.equal(run.status, "failure");
      assert.equal(run.error?.type, "store_unavailable");
      assert.match(run.error?.message ?? "", /too many clients/);
    });

    it("its own failure ends it at once: raised, timed out, out of memory", async () => {
      const defer = deferCleanup();
      const failures = new Map<string, (request: ExecuteRequest) => unknown>([
        ["raises", (r) => new RunFailure("ValueError", "bad input", { runId: r.runId, exception: true })],
        ["oom", (r) => new RunFailure("out-of-memory", "The replica exceeded its memory limit", { runId: r.runId })],
        ["gone", (r) => new RunFailure("upstream_error", "The host went away during the call", { runId: r.runId })],
      ]);
      const byRun = new Map<string, string>();
      const x = scriptedExecutor((runId) => ({ throws: failures.get(byRun.get(runId)!)! }));
      const t = await setUp(defer, x.executor);
      for (const name of failures.keys()) byRun.set(await t.submit(name), name);
      for (const [runId, name] of byRun) {
        const run = await t.ended(runId);
        assert.equal(run.status, "failure", name);
        assert.equal(x.count(runId), 1, `${name} ran once`);
        assert.equal(t.putBack(runId).length, 0);
      }
    });

    it("an unknown function fails at once (not_found), as does an app that cannot load (app_unavailable)", async () => {
      const defer = deferCleanup();
      const x = scriptedExecutor((_runId, n) => ({
        throws: (r) =>
          r.functionName === "missing"
            ? new ProblemError("not-found", `No function missing in ${PROJECT}/a`)
            : new ProblemError("app-unavailable", `App ${PROJECT}/a failed to load: SyntaxError (${n})`),
      }));
      const t = await setUp(defer, x.executor);
      const missing = await t.submit("missing");
      const broken = await t.submit("f");
      assert.equal((await t.ended(missing)).error?.type, "not_found");
      assert.equal((await t.ended(broken)).error?.type, "app_unavailable");
      assert.equal(x.count(missing) + x.count(broken), 2);
    });

    it("turned away after a replica took the call: not put back (its function may have started)", async () => {
      const defer = deferCleanup();
      const x = scriptedExecutor(() => ({
        throws: (r) => {
          r.onDeployment?.("dep_1");
          return new NoSeatError(`${PROJECT}/a`);
        },
      }));
      const t = await setUp(defer, x.executor);
      const runId = await t.submit();
      const run = await t.ended(runId);
      assert.equal(run.status, "failure");
      assert.equal(run.error?.type, "service_unavailable");
      assert.equal(x.count(runId), 1);
    });
  });

  describe(`putBackOnQueue (${engine})`, () => {
    it("puts back only a run still running under the owner's lease, in its generation, with no cancel asked, keeping its id", async () => {
      const defer = deferCleanup();
      const scratch = await openTestStore(engine);
      defer(() => scratch.close());
      const { db } = scratch.store;
      const row = (runId: string, values: Record<string, unknown> = {}) => ({
        run_id: runId,
        project_id: PROJECT,
        app_id: "a",
        function_name: "f",
        mode: "async" as const,
        status: "running" as const,
        created_at: 1_000,
        started_at: 2_000,
        completed_at: null,
        queue_time_ms: 1_000,
        run_time_ms: null,
        input_json: "{}",
        result_json: null,
        error_type: null,
        error_message: null,
        error_traceback: null,
        webhook_endpoint: null,
        webhook_secret: null,
        webhook_credentials: null,
        lease_owner: "owner-a",
        lease_expires_at: 9_000,
        cancel_requested: 0,
        lease_generation: 3,
        ...values,
      });
      await db.insertInto("runs").values([
        row("run-mine"),
        row("run-other", { lease_owner: "owner-b" }),
        row("run-cancel", { cancel_requested: 1 }),
        row("run-ended", { status: "failure", lease_owner: null, lease_expires_at: null }),
        // Rescued and claimed again by the same owner: a later holding, not the one being put back.
        row("run-later", { lease_generation: 5 }),
      ]).execute();
      assert.equal(await putBackOnQueue(db, { runId: "run-mine", owner: "owner-a", generation: 3 }), true);
      for (const runId of ["run-other", "run-cancel", "run-ended", "run-later"]) {
        assert.equal(await putBackOnQueue(db, { runId, owner: "owner-a", generation: 3 }), false, runId);
      }
      const mine = await db.selectFrom("runs").selectAll().where("run_id", "=", "run-mine").executeTakeFirstOrThrow();
      assert.equal(mine.status, "queued");
      assert.equal(Number(mine.created_at), 1_000);
      assert.deepEqual([mine.started_at, mine.queue_time_ms, mine.lease_owner, mine.lease_expires_at], [
        null,
        null,
        null,
        null,
      ]);
      const others = await db.selectFrom("runs").select(["run_id", "status"]).where("run_id", "!=", "run-mine")
        .orderBy("run_id").execute();
      assert.deepEqual(others.map((r) => r.status), ["running", "failure", "running", "running"]);
      assert.equal(Number(mine.lease_generation), 4, "its holding is closed");
    });
  });
}
