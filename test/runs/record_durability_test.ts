import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { type Kysely, sql } from "kysely";
import { createLogger } from "../../server/log.ts";
import { isProblemError } from "../../server/problems/mod.ts";
import { createRunService, type LiveRun, type RunService } from "../../server/runs/mod.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { type Database, ensureProject, openStore, type Store } from "../../server/store/mod.ts";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { type AppRef, callRun, getRun, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually, startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

/** Makes the store refuse, for real, every write of a run of function `fn` (a trigger that raises). */
async function refuseRunsOf(db: Kysely<Database>, fn: string): Promise<void> {
  for (const event of ["insert", "update"]) {
    await sql
      .raw(
        `create trigger "refuse_${fn}_${event}" before ${event} on "runs" when new."function_name" = '${fn}'`
          + ` begin select raise(abort, 'refused by the test'); end`,
      )
      .execute(db);
  }
}

/** Lets the store take writes of `fn`'s runs again. */
async function acceptRunsOf(db: Kysely<Database>, fn: string): Promise<void> {
  for (const event of ["insert", "update"]) await sql.raw(`drop trigger "refuse_${fn}_${event}"`).execute(db);
}

async function storedRun(db: Kysely<Database>, runId: string) {
  return await db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirst();
}

async function storedDelivery(db: Kysely<Database>, runId: string) {
  return await db.selectFrom("webhook_deliveries").selectAll().where("run_id", "=", runId).executeTakeFirst();
}

describe("the run service keeps a record the store refused", () => {
  let dir: string;
  let store: Store;
  let logs: Array<Record<string, unknown>>;
  let runs: RunService;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "runplane-durable-"));
    store = await openStore(dir);
    await ensureProject(store.db, "p-durable");
  });
  after(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function startService(recordRetry: { delaysMs: number[]; keptMs: number }): RunService {
    logs = [];
    const destination = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split("\n")) if (line) logs.push(JSON.parse(line));
        done();
      },
    });
    return createRunService({
      db: store.db,
      secrets: createSecretBox(randomBytes(32)),
      logger: createLogger({ level: "info", destination }),
      config: { resultTtlMs: 3_600_000, runLeaseMs: 30_000, webhookAllowPrivate: false },
      recordRetry,
    });
  }

  async function live(fn: string): Promise<LiveRun> {
    const submission = await runs.submit({
      projectId: "p-durable",
      app: "a",
      functionName: fn,
      mode: "sync",
      input: {},
      webhook: { endpoint: "https://hooks.example.com/run" },
    });
    assert.equal(submission.kind, "live");
    return (submission as { run: LiveRun }).run;
  }

  it("retries a refused commit: a store that takes it again within the retries answers as usual", async () => {
    runs = startService({ delaysMs: [50, 3_000], keptMs: 60_000 });
    try {
      await refuseRunsOf(store.db, "flaky");
      const run = await live("flaky");
      const answered = run.succeed({ n: 1 });
      // The first write and the retry after 50 ms are refused; the one after 3 s finds the store willing.
      await sleep(400);
      assert.equal(await storedRun(store.db, run.runId), undefined, "nothing stored while the store refuses");
      await acceptRunsOf(store.db, "flaky");
      await answered;
      assert.equal((await storedRun(store.db, run.runId))?.status, "success");
      assert.equal((await storedDelivery(store.db, run.runId))?.status, "pending");
      assert.equal(logs.filter((line) => line.level === 50).length, 0);
    } finally {
      await runs.stop();
    }
  });

  it("answers 503 with the run id when the commit stays refused, commits the others, and writes it later", async () => {
    runs = startService({ delaysMs: [20, 20], keptMs: 100 });
    try {
      await refuseRunsOf(store.db, "doomed");
      const doomed = await live("doomed");
      const fine = await live("fine");
      // Both end in the same turn: one shared commit, which the doomed run makes fail.
      const [refused, taken] = await Promise.allSettled([doomed.succeed("lost?"), fine.succeed("kept")]);
      assert.equal(taken.status, "fulfilled", "a run sharing the batch is committed");
      assert.equal((await storedRun(store.db, fine.runId))?.status, "success");
      assert.equal(refused.status, "rejected");
      const problem = (refused as PromiseRejectedResult).reason;
      assert.ok(isProblemError(problem), String(problem));
      assert.equal(problem.status, 503);
      assert.equal(problem.toDocument().run_id, doomed.runId);
      assert.equal(await storedRun(store.db, doomed.runId), undefined);
      assert.ok(
        logs.some((line) => line.level === 50 && line.run_id === doomed.runId),
        `an error line names the run: ${JSON.stringify(logs)}`,
      );
      // The record was kept: once the store takes it, it is written with its webhook delivery.
      await acceptRunsOf(store.db, "doomed");
      const stored = await eventually(async () => await storedRun(store.db, doomed.runId), 10_000, "the kept record");
      assert.equal(stored.status, "success");
      assert.equal(stored.result_json, '"lost?"');
      assert.ok(await storedDelivery(store.db, doomed.runId), "its webhook delivery is in the outbox");
    } finally {
      await runs.stop();
    }
  });

  it("logs a record still refused at stop as lost, with its run id", async () => {
    runs = startService({ delaysMs: [10], keptMs: 60_000 });
    await refuseRunsOf(store.db, "never");
    try {
      const run = await live("never");
      await assert.rejects(run.fail(new Error("boom")), (error) => isProblemError(error) && error.status === 503);
      await runs.stop();
      assert.ok(
        logs.some((line) => line.level === 50 && line.run_id === run.runId && /lost/.test(String(line.msg))),
        `a lost line names the run: ${JSON.stringify(logs.filter((line) => line.level === 50))}`,
      );
      assert.equal(await storedRun(store.db, run.runId), undefined);
    } finally {
      await acceptRunsOf(store.db, "never");
    }
  });
});

const MAIN = `
import time

def doomed():
    return {"answer": 42}

def fine():
    return {"answer": 1}

def doomed_stream():
    yield "one"
    yield "two"

def endless():
    i = 0
    while True:
        yield i
        i += 1
        time.sleep(0.1)
`;

describe("an answered call is a recorded call (over HTTP, with a real store failure)", () => {
  let t: TestServer;
  let receiver: WebhookReceiver;
  const ref = (): AppRef => ({ client: t.client, project: TEST_PROJECT, app: "rec" });

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    await deployApp(t, "rec", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurrency = 4\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
    receiver = await startWebhookReceiver();
  });
  after(async () => {
    await receiver.close();
    await t.close();
  });

  it("answers a sync call with a webhook 503 (with its run id) when its record cannot be stored; a call beside it succeeds; the record and webhook follow once the store recovers", async () => {
    const db = t.server.context.store.db;
    await refuseRunsOf(db, "doomed");
    let acceptedAgain = false;
    try {
      const [refused, beside] = await Promise.all([
        callRun(ref(), "doomed", { webhookEndpoint: receiver.url }),
        callRun(ref(), "fine", { webhookEndpoint: receiver.url }),
      ]);
      assert.equal(beside.response.status, 200);
      assert.equal(refused.response.status, 503);
      const problem = refused.error as unknown as { type: string; run_id: string };
      assert.match(problem.type, /store-unavailable$/);
      const runId = refused.response.headers.get("x-request-id")!;
      assert.equal(problem.run_id, runId);
      assert.ok(
        t.logs.some((line) => line.level === 50 && line.run_id === runId),
        "the refused record is logged at error with its run id",
      );
      await receiver.waitFor(1);
      await sleep(300);
      assert.deepEqual(
        receiver.requests.map((request) => request.headers["x-request-id"]),
        [(beside.data as { run_id: string }).run_id],
        "only the recorded run's webhook left",
      );
      await acceptRunsOf(db, "doomed");
      acceptedAgain = true;
      const run = await waitForStatus(ref(), runId, ["success"], 15_000);
      assert.deepEqual(run.result, { answer: 42 });
      await receiver.waitFor(2, 15_000);
      assert.equal(receiver.requests[1].headers["x-request-id"], runId);
    } finally {
      if (!acceptedAgain) await acceptRunsOf(db, "doomed");
    }
  });

  it("ends a stream with a webhook with a 503 error event when its record cannot be stored", async () => {
    const db = t.server.context.store.db;
    await refuseRunsOf(db, "doomed_stream");
    try {
      const response = await checkedFetch(
        `${t.url}/v4/${TEST_PROJECT}/rec/doomed_stream?webhookEndpoint=${encodeURIComponent(receiver.url)}`,
        {
          method: "POST",
          headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
          body: "{}",
        },
      );
      const runId = response.headers.get("x-request-id")!;
      const text = await response.text();
      const events = text.split("\n\n").filter(Boolean);
      assert.deepEqual(events.slice(0, 2), ["data: one", "data: two"]);
      const last = events.at(-1)!;
      assert.match(last, /^event: error\ndata: /);
      const problem = JSON.parse(last.split("\ndata: ")[1]) as { status: number; run_id: string };
      assert.equal(problem.status, 503);
      assert.equal(problem.run_id, runId);
    } finally {
      await acceptRunsOf(db, "doomed_stream");
    }
  });

  it("records a stream whose client disconnected as cancelled", async () => {
    const abort = new AbortController();
    const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/rec/endless`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: "{}",
      signal: abort.signal,
    });
    const runId = response.headers.get("x-request-id")!;
    const reader = response.body!.getReader();
    await reader.read();
    abort.abort();
    const run = await waitForStatus(ref(), runId, ["success", "failure", "cancelled"]);
    assert.equal(run.status, "cancelled");
    assert.equal(run.error, null);
    assert.equal((await getRun(ref(), runId)).data?.mode, "stream");
  });
});
