import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ProblemError } from "../../server/problems/mod.ts";
import type { RunCall } from "../../server/runs/mod.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { createTestExecutor, type TestExecutor } from "../_helpers/test_executor.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

describe("runs: records, dispatcher, cancel, idempotency", () => {
  let t: TestServer;
  let ex: TestExecutor;
  before(async () => {
    ex = createTestExecutor({ slots: 2, slotsByApp: { blocked: 0 }, graceByApp: { slow: 400 } });
    t = await startTestServer({ env: { RUNPLANE_RESULT_TTL: "2s" }, serverOptions: { executor: ex.executor } });
  });
  after(() => t.close());

  const call = (app: string, functionName: string, input: Record<string, unknown> = {}, extra: Partial<RunCall> = {}): RunCall => ({
    projectId: TEST_PROJECT,
    app,
    functionName,
    mode: "async",
    input,
    ...extra,
  });

  async function accepted(c: RunCall): Promise<string> {
    const submitted = await t.server.context.runs.submit(c);
    assert.equal(submitted.kind, "accepted");
    return (submitted as { runId: string }).runId;
  }

  function getRun(app: string, runId: string) {
    return t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path: { project_id: TEST_PROJECT, app_id: app, run_id: runId } } });
  }

  function waitStatus(app: string, runId: string, statuses: string[]) {
    return eventually(async () => {
      const { data } = await getRun(app, runId);
      return data && statuses.includes(data.status) ? data : undefined;
    }, 20_000, `${runId} to reach ${statuses.join("/")}`);
  }

  it("accepts an async run at once and takes it queued → running → success", async () => {
    const started = performance.now();
    const runId = await accepted(call("a1", "echo", { sleep_ms: 1500, x: 1 }));
    assert.ok(performance.now() - started < 500, "submit must not wait for the function");
    assert.match(runId, /^run_[0-9a-z]{26}$/);
    const running = await waitStatus("a1", runId, ["running"]);
    assert.equal(running.result, null);
    assert.ok(running.started_at);
    const done = await waitStatus("a1", runId, ["success"]);
    assert.deepEqual(done.result, { sleep_ms: 1500, x: 1 });
    assert.equal(done.mode, "async");
    assert.ok((done.run_time_ms ?? 0) >= 1400, `run_time_ms ${done.run_time_ms}`);
    assert.ok((done.queue_time_ms ?? -1) >= 0);
    assert.equal(done.error, null);
  });

  it("records a raised exception's type, message and traceback", async () => {
    const runId = await accepted(call("a1", "fail"));
    const done = await waitStatus("a1", runId, ["failure"]);
    assert.deepEqual(done.error, { type: "ValueError", message: "bad value", traceback: "Traceback (most recent call last):\n  ValueError: bad value" });
  });

  it("collects a streaming function called async into a list", async () => {
    const runId = await accepted(call("a1", "stream", { items: ["a", { b: 2 }, 3] }));
    const done = await waitStatus("a1", runId, ["success"]);
    assert.deepEqual(done.result, ["a", { b: 2 }, 3]);
  });

  it("ends a run past its app's grace period as failure/timeout and stops the worker", async () => {
    const runId = await accepted(call("slow", "hang"));
    const done = await waitStatus("slow", runId, ["failure"]);
    assert.equal(done.error?.type, "timeout");
    assert.ok(ex.aborted.includes(runId));
  });

  it("runs an app's queued runs in arrival order, never more at once than its slots", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) ids.push(await accepted(call("order", "echo", { sleep_ms: 150 })));
    for (const id of ids) await waitStatus("order", id, ["success"]);
    assert.deepEqual(ex.started.filter((id) => ids.includes(id)), ids);
    assert.equal(ex.peak.get("order"), 2, "the app has 2 slots");
  });

  it("lists runs newest first with an opaque cursor and a status filter", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const submitted = await t.server.context.runs.submit(call("list", "run", {}, { mode: "sync" }));
      if (submitted.kind !== "live") throw new Error("expected a live run");
      if (i === 2) submitted.run.fail({ errorType: "KeyError", message: "k" });
      else submitted.run.succeed(i);
      ids.push(submitted.run.runId);
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
        params: { path: { project_id: TEST_PROJECT, app_id: "list" }, query: { limit: 2, cursor } },
      });
      assert.ok(data);
      assert.ok(data.runs.length <= 2);
      seen.push(...data.runs.map((r) => r.run_id));
      cursor = data.next_cursor ?? undefined;
      pages++;
    } while (cursor);
    assert.equal(pages, 3);
    assert.deepEqual(seen, [...ids].reverse());
    const { data: failures } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
      params: { path: { project_id: TEST_PROJECT, app_id: "list" }, query: { status: "failure" } },
    });
    assert.deepEqual(failures?.runs.map((r) => r.run_id), [ids[2]]);
    assert.equal(failures?.next_cursor, null);
    const bad = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
      params: { path: { project_id: TEST_PROJECT, app_id: "list" }, query: { cursor: "not-a-cursor" } },
    });
    assert.equal(bad.response.status, 400);
  });

  it("answers 404 for a run of another app or an unknown run", async () => {
    const runId = await accepted(call("a1", "echo"));
    assert.equal((await getRun("other-app", runId)).response.status, 404);
    assert.equal((await getRun("a1", "run_0000000000aaaaaaaaaaaaaaaa")).response.status, 404);
  });

  it("cancels a queued run at once, and answers 409 for a finished one", async () => {
    const runId = await accepted(call("blocked", "echo"));
    const path = { project_id: TEST_PROJECT, app_id: "blocked", run_id: runId };
    const { data } = await t.client.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path } });
    assert.equal(data?.status, "cancelled");
    assert.ok(data?.completed_at);
    const again = await t.client.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", { params: { path } });
    assert.equal(again.response.status, 409);
    assert.equal(again.error?.run_id, runId);
    assert.ok(!ex.started.includes(runId), "a cancelled queued run never starts");
  });

  it("cancels a running run: the worker is interrupted and the run ends cancelled", async () => {
    const runId = await accepted(call("a1", "hang"));
    await waitStatus("a1", runId, ["running"]);
    const { data } = await t.client.DELETE("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
      params: { path: { project_id: TEST_PROJECT, app_id: "a1", run_id: runId } },
    });
    assert.equal(data?.status, "cancelled");
    assert.ok(ex.aborted.includes(runId));
  });

  it("replays an async call with the same Idempotency-Key and body, and refuses another body with 422", async () => {
    const first = await accepted(call("idem", "echo", { v: 1 }, { idempotencyKey: "key-1" }));
    const second = await t.server.context.runs.submit(call("idem", "echo", { v: 1 }, { idempotencyKey: "key-1" }));
    assert.deepEqual(second, { kind: "accepted", runId: first, replayed: true });
    await assert.rejects(t.server.context.runs.submit(call("idem", "echo", { v: 2 }, { idempotencyKey: "key-1" })), (error: unknown) => {
      assert.ok(error instanceof ProblemError);
      assert.equal(error.status, 422);
      return true;
    });
  });

  it("answers 409 while the first sync call with a key runs, then replays its stored result", async () => {
    const sync = call("idem", "echo", { v: 3 }, { mode: "sync", idempotencyKey: "key-sync" });
    const first = await t.server.context.runs.submit(sync);
    if (first.kind !== "live") throw new Error("expected a live run");
    await assert.rejects(t.server.context.runs.submit(sync), (error: unknown) => error instanceof ProblemError && error.status === 409);
    first.run.succeed({ out: 3 });
    const replay = await t.server.context.runs.submit(sync);
    assert.equal(replay.kind, "replay");
    if (replay.kind === "replay") {
      assert.equal(replay.run.run_id, first.run.runId);
      assert.deepEqual(replay.run.result, { out: 3 });
    }
  });

  it("removes a result after RUNPLANE_RESULT_TTL and keeps status and timestamps", async () => {
    const submitted = await t.server.context.runs.submit(call("ttl", "run", {}, { mode: "sync" }));
    if (submitted.kind !== "live") throw new Error("expected a live run");
    submitted.run.succeed({ keep: "briefly" });
    const fresh = (await getRun("ttl", submitted.run.runId)).data;
    assert.deepEqual(fresh?.result, { keep: "briefly" });
    assert.equal(fresh?.result_expired, false);
    const expired = await eventually(async () => {
      const { data } = await getRun("ttl", submitted.run.runId);
      return data?.result_expired ? data : undefined;
    }, 10_000, "the result to expire");
    assert.equal(expired.result, null);
    assert.equal(expired.status, "success");
    assert.equal(expired.completed_at, fresh?.completed_at);
    // The upkeep loop removes it from the store too.
    const row = await eventually(async () => {
      const r = await t.server.context.store.db.selectFrom("runs").select(["result_json", "result_expired"]).where("run_id", "=", submitted.run.runId).executeTakeFirst();
      return r?.result_expired === 1 ? r : undefined;
    }, 15_000, "the stored result to be removed");
    assert.equal(row.result_json, null);
  });
});
