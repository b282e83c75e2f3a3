/**
 * Whole run rows written in batches, on both engines: SQLite takes a multi-row `VALUES`, PostgreSQL one
 * `unnest` of an array per column, so every value must come back as it went in, whatever it holds. The
 * same for the ends of leased runs, written together.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type Insertable, sql } from "kysely";
import { randomBytes } from "node:crypto";
import { createLogger } from "../../server/log.ts";
import { createLeasedFinishes } from "../../server/runs/_leased_finishes.ts";
import { createRunService, type LiveRun } from "../../server/runs/mod.ts";
import { createSecretBox } from "../../server/secrets/mod.ts";
import { finishLeasedRuns, finishRun, type RunOutcome } from "../../server/runs/_queries.ts";
import { runEnd } from "../../server/runs/_run_end.ts";
import { createWriteBehind } from "../../server/runs/_write_behind.ts";
import {
  insertAllNewRuns,
  insertNewRuns,
  insertRuns,
  runRowWith,
  upsertRuns,
} from "../../server/store/statements/run_rows.ts";
import type { RunTable } from "../../server/store/schema.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

/** Text that an array literal must quote or escape, and text that only looks like something else. */
const AWKWARD = ['"quoted"', "back\\slash", "{braces},commas", "NULL", "", "line\nbreak", "ünïcødé ✓", " padded "];

function row(i: number, text: string): Insertable<RunTable> {
  return {
    run_id: `run_rows_${String(i).padStart(3, "0")}`,
    project_id: "p",
    app_id: "a",
    function_name: "f",
    mode: "async",
    status: "queued",
    created_at: 1_764_000_000_000 + i,
    started_at: i % 2 ? null : 1_764_000_000_500 + i,
    queue_time_ms: i % 2 ? null : 0.125 * i,
    input_json: JSON.stringify({ text }),
    error_message: i % 3 ? null : text,
    webhook_endpoint: text,
    rerun_of: null,
  };
}

for (const engine of await engines()) {
  describe(`run rows written in a batch (${engine})`, () => {
    let t: TestStore;
    before(async () => {
      t = await openTestStore(engine);
      await t.store.db.insertInto("projects").values({ id: "p", created_at: Date.now() }).onConflict((oc) =>
        oc.column("id").doNothing()
      ).execute();
    });
    after(() => t?.close());

    it("stores every value of every row as given: quotes, backslashes, braces, 'NULL', nulls and numbers", async () => {
      const rows = AWKWARD.map((text, i) => row(i, text));
      await insertRuns(t.store.db, rows);
      const stored = await t.store.db.selectFrom("runs").selectAll().where("run_id", "like", "run_rows_%")
        .orderBy("run_id").execute();
      assert.equal(stored.length, rows.length);
      for (const [i, expected] of rows.entries()) {
        const got = stored[i];
        assert.equal(got.run_id, expected.run_id);
        assert.equal(got.webhook_endpoint, AWKWARD[i]);
        assert.equal(got.error_message, expected.error_message);
        assert.equal(got.input_json, expected.input_json);
        assert.equal(Number(got.created_at), expected.created_at);
        assert.equal(got.started_at === null ? null : Number(got.started_at), expected.started_at);
        assert.equal(got.queue_time_ms, expected.queue_time_ms);
        assert.equal(got.result_json, null);
        assert.equal(Number(got.result_truncated), 0, "a column left out is written as its default");
      }
    });

    it("inserts new runs, replaces queued and running ones of the row's lease generation not held elsewhere, keeps every end (a lease rescue's of the owner's run too)", async () => {
      const id = (i: number) => `ups_${String(i).padStart(3, "0")}`;
      const ended = (i: number, text: string): Insertable<RunTable> => ({
        ...row(i, text),
        run_id: id(i),
        status: "success",
        completed_at: 1_764_000_009_000 + i,
        result_json: JSON.stringify(text),
      });
      // Stored first: a running run of ours, a queued one, a run ended by someone else, two ended by a lease
      // rescue (one of ours), one running under another owner, one of ours claimed again since (generation 1).
      await insertRuns(t.store.db, [
        { ...row(0, "running"), run_id: id(0), status: "running", lease_owner: "me" },
        { ...row(1, "queued"), run_id: id(1) },
        { ...ended(2, "theirs"), status: "failure" },
        { ...row(3, "swept"), run_id: id(3), status: "failure", error_type: "interrupted" },
        { ...row(4, "swept"), run_id: id(4), status: "failure", error_type: "interrupted" },
        { ...row(5, "elsewhere"), run_id: id(5), status: "running", lease_owner: "other" },
        { ...row(6, "again"), run_id: id(6), status: "running", lease_owner: "me", lease_generation: 1 },
      ]);
      for (const [i, owner] of [[3, "me"], [4, "other"]] as const) {
        await t.store.db.updateTable("runs").set({ swept_owner: owner }).where("run_id", "=", id(i)).execute();
      }
      // 300 rows: chunks of 256, 32, 8 and 4, the stored seven among them.
      const rows = Array.from({ length: 300 }, (_, i) => ended(i, AWKWARD[i % AWKWARD.length]));
      const written = await upsertRuns(t.store.db, rows, "me");
      const keptIds = new Set([2, 3, 4, 5, 6]);
      assert.equal(written.size, 295);
      for (const i of keptIds) assert.ok(!written.has(id(i)), `run ${i} ended or held otherwise keeps its row`);
      const stored = await t.store.db.selectFrom("runs").selectAll().where("run_id", "like", "ups_%")
        .orderBy("run_id").execute();
      assert.equal(stored.length, 300);
      const storedText = ["", "", "theirs", "swept", "swept", "elsewhere", "again"];
      for (const [i, got] of stored.entries()) {
        const kept = keptIds.has(i);
        const status = i === 5 || i === 6 ? "running" : kept ? "failure" : "success";
        assert.equal(got.status, status, got.run_id);
        assert.equal(got.webhook_endpoint, kept ? storedText[i] : AWKWARD[i % AWKWARD.length]);
        if (!kept) assert.equal(got.result_json, rows[i].result_json);
      }
      assert.equal(stored[3].swept_owner, "me", "a lease rescue's end of the owner's own run stands");
      assert.deepEqual(await upsertRuns(t.store.db, [], "me"), new Set());
    });

    it("inserts runs written for the first time; a run stored already (a try whose answer was lost) keeps its row and is not in the answer", async () => {
      const id = (i: number) => `new_${String(i).padStart(3, "0")}`;
      const fresh = (i: number): Insertable<RunTable> => ({
        ...row(i, AWKWARD[i % AWKWARD.length]),
        run_id: id(i),
        mode: "sync",
        status: "success",
        completed_at: 1_764_000_009_000 + i,
        result_json: JSON.stringify(i),
      });
      // The earlier try committed run 7 (its answer lost): the same row, once.
      await insertRuns(t.store.db, [{ ...fresh(7), webhook_endpoint: "first try" }]);
      // 37 rows: chunks of 32, 4 and 1.
      const rows = Array.from({ length: 37 }, (_, i) => fresh(i));
      const written = await insertNewRuns(t.store.db, rows);
      assert.equal(written.size, 36);
      assert.ok(!written.has(id(7)), "the run stored already is not written again");
      const stored = await t.store.db.selectFrom("runs").selectAll().where("run_id", "like", "new_%")
        .orderBy("run_id").execute();
      assert.equal(stored.length, 37);
      for (const [i, got] of stored.entries()) {
        assert.equal(got.webhook_endpoint, i === 7 ? "first try" : AWKWARD[i % AWKWARD.length], got.run_id);
        assert.equal(got.result_json, String(i));
        assert.equal(got.status, "success");
      }
      assert.deepEqual(await insertNewRuns(t.store.db, []), new Set());
    });

    it("inserts runs never written before without reading them back, and says when one was stored already", async () => {
      const id = (i: number) => `all_${String(i).padStart(3, "0")}`;
      const fresh = (i: number): Insertable<RunTable> => ({
        ...row(i, AWKWARD[i % AWKWARD.length]),
        run_id: id(i),
        mode: "sync",
        status: "success",
        result_json: JSON.stringify(i),
      });
      // 37 rows: chunks of 32, 4 and 1.
      assert.equal(await insertAllNewRuns(t.store.db, Array.from({ length: 37 }, (_, i) => fresh(i))), true);
      const stored = await t.store.db.selectFrom("runs").selectAll().where("run_id", "like", "all_%")
        .orderBy("run_id").execute();
      assert.equal(stored.length, 37);
      for (const [i, got] of stored.entries()) {
        assert.equal(got.webhook_endpoint, AWKWARD[i % AWKWARD.length], got.run_id);
        assert.equal(got.result_json, String(i));
        assert.equal(got.method, "POST", "a column left out is written as its default");
        assert.equal(got.lease_generation, 0);
      }
      // Run 40 of the next batch is stored already (a try whose answer was lost).
      const again = Array.from({ length: 5 }, (_, i) => fresh(37 + i));
      await insertRuns(t.store.db, [{ ...again[3], webhook_endpoint: "first try" }]);
      assert.equal(await insertAllNewRuns(t.store.db, again), false);
      assert.equal(await insertAllNewRuns(t.store.db, []), true);
    });

    it("writes a batch whose run written for the first time was stored already: the others are written, that one keeps its row", async () => {
      const told: string[] = [];
      const writer = createWriteBehind(t.store.db, {
        owner: "host-a",
        delayMs: 60_000,
        onDeliveries() {},
        onError: (_error, runId) => told.push(`error ${runId}`),
        onLost: (_error, runId) => told.push(`lost ${runId}`),
        onDropped: (runId) => told.push(`dropped ${runId}`),
      });
      const ended = (i: number): Insertable<RunTable> => ({
        ...row(i, "twin"),
        run_id: `twin_${i}`,
        mode: "sync",
        status: "success",
        completed_at: 1_764_000_009_000 + i,
        result_json: JSON.stringify(i),
        lease_owner: "host-a",
      });
      // The earlier try of this batch committed run 1 (its answer lost).
      await insertRuns(t.store.db, [ended(1)]);
      for (const i of [0, 1, 2]) writer.create(ended(i));
      await writer.flush();
      await writer.close();
      assert.deepEqual(told, []);
      const stored = await t.store.db.selectFrom("runs").select(["run_id", "status", "result_json"])
        .where("run_id", "like", "twin_%").orderBy("run_id").execute();
      assert.deepEqual(
        stored,
        [0, 1, 2].map((i) => ({ run_id: `twin_${i}`, status: "success", result_json: String(i) })),
      );
    });
  });
}

for (const engine of await engines()) {
  describe(`a sync call's record (${engine})`, () => {
    it("is one insert when the call ends within the batch window; a call that outlives it is inserted running, then its end replaces that", async () => {
      const statements: string[] = [];
      const t = await openTestStore(engine, { onStatement: (s) => statements.push(s.sql) });
      await t.store.db.insertInto("projects").values({ id: "p", created_at: Date.now() }).execute();
      const runs = createRunService({
        db: t.store.db,
        secrets: createSecretBox(randomBytes(32)),
        logger: createLogger({ level: "silent" }),
        config: { resultTtlMs: 3_600_000, runLeaseMs: 30_000, webhookAllowPrivate: false },
      });
      try {
        const live = async (): Promise<LiveRun> => {
          const submission = await runs.submit({
            projectId: "p",
            app: "a",
            functionName: "f",
            mode: "sync",
            input: {},
          });
          assert.equal(submission.kind, "live");
          return (submission as { run: LiveRun }).run;
        };
        const written = () => statements.filter((s) => /^insert into "runs"/.test(s));
        const writes = async (count: number) => {
          const deadline = Date.now() + 10_000;
          while (written().length < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
        };
        const quick = await live();
        await quick.succeed({ quick: true });
        await writes(1);
        const slow = await live();
        await writes(2);
        await slow.succeed({ quick: false });
        await runs.stop();
        const [first, second, third] = written();
        assert.match(first, /on conflict \("run_id"\) do nothing/, "the quick call, ended: an insert");
        assert.match(second, /on conflict \("run_id"\) do nothing/, "the slow call, running: an insert");
        assert.match(third, /do update set/, "the slow call's end replaces its running row");
        assert.equal(written().length, 3, written().join("\n"));
        const stored = await t.store.db.selectFrom("runs").select(["run_id", "status", "result_json"])
          .where("run_id", "in", [quick.runId, slow.runId]).orderBy("run_id").execute();
        assert.deepEqual(stored.map((r) => [r.status, r.result_json]), [
          ["success", '{"quick":true}'],
          ["success", '{"quick":false}'],
        ]);
      } finally {
        await runs.stop();
        await t.close();
      }
    });
  });
}

for (const engine of await engines()) {
  describe(`a call begun late in a batch window (${engine})`, () => {
    it("waits for the next window: ended by then, it is written once, as an insert of its end", async () => {
      const statements: Array<{ sql: string; parameters: readonly unknown[] }> = [];
      let onRunsWrite = () => {};
      const t = await openTestStore(engine, {
        onStatement(statement) {
          if (!/^insert into "runs"/.test(statement.sql)) return;
          statements.push(statement);
          onRunsWrite();
        },
      });
      await t.store.db.insertInto("projects").values({ id: "p", created_at: Date.now() }).execute();
      // A long window: the late call's end is put when the first batch's insert has run (a PostgreSQL
      // round trip after the window ended), well before the next window even on a loaded machine.
      const writer = createWriteBehind(t.store.db, {
        owner: "host-a",
        delayMs: 3_000,
        onDeliveries() {},
        onError() {},
        onLost() {},
      });
      try {
        const running = (i: number): Insertable<RunTable> => ({
          ...row(i, "late"),
          mode: "sync",
          status: "running",
          lease_owner: "host-a",
        });
        const quick = running(1);
        writer.create(quick);
        writer.put(runRowWith(quick, { status: "success", result_json: "1", completed_at: Date.now() }));
        const late = running(2);
        writer.create(late);
        // The late call ends as the first window's batch is being written.
        onRunsWrite = () => {
          onRunsWrite = () => {};
          writer.put(runRowWith(late, { status: "success", result_json: "2", completed_at: Date.now() }));
        };
        const deadline = Date.now() + 20_000;
        while (statements.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        await writer.close();
        const [first, second] = statements;
        // PostgreSQL's parameters are one array per column.
        const writes = (statement: { parameters: readonly unknown[] }, runId: string) =>
          statement.parameters.flat().includes(runId);
        assert.equal(writes(first, quick.run_id), true, "the first window writes the quick call");
        assert.equal(writes(first, late.run_id), false, "the late call's running row is not written");
        assert.match(second.sql, /on conflict \("run_id"\) do nothing/, "the late call: an insert");
        assert.equal(writes(second, late.run_id), true);
        assert.equal(statements.length, 2, statements.map((s) => s.sql).join("\n"));
        const stored = await t.store.db.selectFrom("runs").select(["run_id", "status", "result_json"])
          .where("run_id", "in", [quick.run_id, late.run_id]).orderBy("run_id").execute();
        assert.deepEqual(stored.map((r) => [r.status, r.result_json]), [["success", "1"], ["success", "2"]]);
      } finally {
        await writer.close();
        await t.close();
      }
    });

    it("is written running by the second window when it is still running then", async () => {
      const statements: Array<{ sql: string; parameters: readonly unknown[] }> = [];
      const t = await openTestStore(engine, {
        onStatement(statement) {
          if (/^insert into "runs"/.test(statement.sql)) statements.push(statement);
        },
      });
      await t.store.db.insertInto("projects").values({ id: "p", created_at: Date.now() }).execute();
      const writer = createWriteBehind(t.store.db, { owner: "host-a", onDeliveries() {}, onError() {}, onLost() {} });
      try {
        const long: Insertable<RunTable> = {
          ...row(3, "long"),
          mode: "sync",
          status: "running",
          lease_owner: "host-a",
        };
        writer.create(long);
        // The statement is seen as it is sent, before its transaction commits: wait for the row itself.
        const read = () =>
          t.store.db.selectFrom("runs").select("status").where("run_id", "=", long.run_id).executeTakeFirst();
        const deadline = Date.now() + 20_000;
        let stored = await read();
        while (!stored && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 5));
          stored = await read();
        }
        assert.equal(stored?.status, "running");
        assert.equal(statements.length, 1, statements.map((s) => s.sql).join("\n"));
      } finally {
        await writer.close();
        await t.close();
      }
    });
  });
}

describe("a run row with its end over it", () => {
  it("takes every column the end sets, nulls included, and the row's others", () => {
    const first = {
      ...row(1, "x"),
      status: "running" as const,
      lease_owner: "me",
      lease_expires_at: 5,
      deployment_id: "d1",
    };
    const merged = runRowWith(first, {
      status: "success",
      lease_owner: null,
      lease_expires_at: null,
      result_json: "1",
    });
    assert.deepEqual(merged, {
      ...first,
      status: "success",
      lease_owner: null,
      lease_expires_at: null,
      result_json: "1",
      method: undefined,
      completed_at: undefined,
      run_time_ms: undefined,
      result_truncated: undefined,
      error_type: undefined,
      error_traceback: undefined,
      webhook_secret: undefined,
      webhook_credentials: undefined,
      lease_generation: undefined,
      websocket_json: undefined,
    });
  });
});

/** A running run leased to `owner`, with a webhook when `webhook` is given. */
function running(id: string, owner: string, webhook: string | null = null): Insertable<RunTable> {
  return {
    run_id: id,
    project_id: "p",
    app_id: "ends",
    function_name: "f",
    mode: "async",
    status: "running",
    created_at: 1_764_000_000_000,
    started_at: 1_764_000_000_100,
    queue_time_ms: 100,
    input_json: "{}",
    webhook_endpoint: webhook,
    webhook_secret: webhook ? "sealed-secret" : null,
    lease_owner: owner,
    lease_expires_at: 1_764_000_030_000,
    rerun_of: null,
  };
}

const SUCCESS = (json: string): RunOutcome => ({ status: "success", result: { json, truncated: false } });

for (const engine of await engines()) {
  describe(`ends of leased runs written together (${engine})`, () => {
    let t: TestStore;
    const statements: string[] = [];
    before(async () => {
      t = await openTestStore(engine, { onStatement: (s) => statements.push(s.sql) });
      await t.store.db.insertInto("projects").values({ id: "p", created_at: Date.now() }).onConflict((oc) =>
        oc.column("id").doNothing()
      ).execute();
    });
    after(() => t?.close());

    it("ends many runs in one statement: only those still running under the owner's lease, with their webhook deliveries", async () => {
      await insertRuns(t.store.db, [
        running("end_a", "me", "https://hooks.example/a"),
        running("end_b", "me"),
        running("end_c", "someone-else"),
        { ...running("end_d", "me", "https://hooks.example/d"), status: "failure", lease_owner: null },
        running("end_e", "me"),
      ]);
      const now = 1_764_000_001_100;
      const rowOf = async (id: string) =>
        await t.store.db.selectFrom("runs").selectAll().where("run_id", "=", id).executeTakeFirstOrThrow();
      statements.length = 0;
      const ended = await finishLeasedRuns(t.store.db, "me", [
        runEnd(await rowOf("end_a"), SUCCESS(`{"x":"${AWKWARD[0].replace(/"/g, '\\"')}"}`), { now }),
        runEnd(await rowOf("end_b"), {
          status: "failure",
          error: { type: "ValueError", message: AWKWARD[5], traceback: AWKWARD[2] },
        }, { now }),
        runEnd(await rowOf("end_c"), SUCCESS("1"), { now }),
        runEnd(await rowOf("end_d"), SUCCESS("2"), { now }),
        runEnd(await rowOf("end_e"), { status: "cancelled" }, { now }),
      ]);
      assert.deepEqual([...ended].sort(), ["end_a", "end_b", "end_e"]);
      assert.equal(statements.filter((s) => /^update "runs"/.test(s)).length, 1, statements.join("\n"));

      const a = await rowOf("end_a");
      assert.equal(a.status, "success");
      assert.equal(a.result_json, `{"x":"\\"quoted\\""}`);
      assert.equal(Number(a.completed_at), now);
      assert.equal(a.run_time_ms, 1000);
      assert.equal(a.lease_owner, null);
      assert.equal(a.lease_expires_at, null);
      assert.equal(a.webhook_secret, null, "the secret moves to the delivery");
      assert.equal(a.input_json, "{}", "the input stays until the result expires");
      const b = await rowOf("end_b");
      assert.deepEqual([b.status, b.error_type, b.error_message, b.error_traceback, b.result_json], [
        "failure",
        "ValueError",
        AWKWARD[5],
        AWKWARD[2],
        null,
      ]);
      assert.equal((await rowOf("end_e")).status, "cancelled");
      assert.equal((await rowOf("end_c")).status, "running", "another owner's run is left alone");
      assert.equal((await rowOf("end_d")).status, "failure", "a run ended first keeps its end");

      const deliveries = await t.store.db.selectFrom("webhook_deliveries").select(["run_id", "secret", "body"])
        .where("run_id", "like", "end_%").execute();
      assert.deepEqual(deliveries.map((d) => d.run_id), ["end_a"], "a delivery only for an ended run with a webhook");
      assert.equal(deliveries[0].secret, "sealed-secret");
      assert.equal(JSON.parse(deliveries[0].body).status, "success");
    });

    it("ends reported together share a commit; a refused batch is written run by run, a refused run again until it is stored", async () => {
      await insertRuns(t.store.db, ["fin_1", "fin_2", "fin_bad", "fin_3"].map((id) => running(id, "me")));
      // The store refuses any end of fin_bad (as a full disk or a broken row would) until the trigger goes.
      if (engine === "sqlite") {
        await sql`create trigger "refuse_bad" before update on "runs" when new."run_id" = 'fin_bad'
          begin select raise(abort, 'refused for the test'); end`.execute(t.store.db);
      } else {
        await sql`create function "refuse_bad"() returns trigger language plpgsql as $$
          begin if new."run_id" = 'fin_bad' then raise exception 'refused for the test'; end if; return new; end $$`
          .execute(t.store.db);
        await sql`create trigger "refuse_bad" before update on "runs" for each row execute function "refuse_bad"()`
          .execute(t.store.db);
      }
      const dropTrigger = () =>
        sql`drop trigger if exists "refuse_bad"${engine === "postgres" ? sql` on "runs"` : sql``}`.execute(t.store.db);
      try {
        const retried: Array<[string, string]> = [];
        const finishes = createLeasedFinishes(t.store.db, "me", {
          retryMs: 20,
          onRetry: (error, runId) => retried.push([runId, String(error)]),
        });
        const rows = await t.store.db.selectFrom("runs").selectAll().where("run_id", "like", "fin_%").orderBy("run_id")
          .execute();
        statements.length = 0;
        const settled: Array<boolean | undefined> = rows.map(() => undefined);
        const results = rows.map((run, i) =>
          finishes.finish(runEnd(run, SUCCESS("true"), { now: 1_764_000_002_000 })).then((
            ended,
          ) => (settled[i] = ended))
        );
        await Promise.all(results.slice(0, 3));
        const updates = () => statements.filter((s) => /^update "runs"/.test(s)).length;
        // One batch for all four, refused; then each again on its own; then fin_bad again and again.
        const deadline = Date.now() + 10_000;
        while (updates() < 1 + rows.length + 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        assert.ok(updates() >= 1 + rows.length + 2, statements.join("\n"));
        assert.deepEqual(settled, [true, true, true, undefined], "the refused run's end is still being tried");
        assert.equal(retried.length, 1, "a run's retries are told once");
        assert.equal(retried[0][0], "fin_bad");
        assert.match(retried[0][1], /refused for the test/);

        await dropTrigger();
        // The retry's pause does not hold a process open (a server's socket does): this test holds it.
        const keepAlive = setInterval(() => {}, 1_000);
        try {
          assert.equal(await results[3], true, "written once the store takes it");
        } finally {
          clearInterval(keepAlive);
        }
        const stored = await t.store.db.selectFrom("runs").select(["run_id", "status"]).where("run_id", "like", "fin_%")
          .orderBy("run_id").execute();
        assert.deepEqual(stored.map((r) => r.status), ["success", "success", "success", "success"]);
      } finally {
        await dropTrigger();
      }
    });

    it("an end of an earlier holding writes nothing: a run claimed again since (another lease generation) or ended by a lease rescue keeps its state, and gets no delivery from it", async () => {
      await insertRuns(t.store.db, [
        { ...running("gen_a", "me", "https://hooks.example/a"), lease_generation: 1 },
        { ...running("gen_b", "me", "https://hooks.example/b"), lease_generation: 1 },
        { ...running("gen_c", "me", "https://hooks.example/c"), lease_generation: 1 },
      ]);
      const rowOf = async (id: string) =>
        await t.store.db.selectFrom("runs").selectAll().where("run_id", "=", id).executeTakeFirstOrThrow();
      const held = await Promise.all(["gen_a", "gen_b", "gen_c"].map(rowOf));
      // Meanwhile gen_b was claimed again (its lease had run out), and gen_c ended by another process's rescue.
      await t.store.db.updateTable("runs").set({ lease_generation: 2 }).where("run_id", "=", "gen_b").execute();
      const now = 1_764_000_003_000;
      const rescue = runEnd(held[2], {
        status: "failure",
        error: { type: "interrupted", message: "gone", traceback: null },
      }, {
        now,
        runTimeMs: null,
      });
      assert.equal(
        await finishRun(t.store.db, rescue, { from: ["running"], generation: 0 }),
        false,
        "another generation",
      );
      assert.equal(
        await finishRun(t.store.db, rescue, {
          from: ["running"],
          staleBefore: 1_764_000_031_000,
          generation: 1,
          sweptOwner: "me",
        }),
        true,
      );
      assert.equal(Number((await rowOf("gen_c")).lease_generation), 2, "a rescue starts a new generation");
      const ended = await finishLeasedRuns(t.store.db, "me", held.map((run) => runEnd(run, SUCCESS("1"), { now })));
      assert.deepEqual([...ended], ["gen_a"]);
      assert.deepEqual(
        (await Promise.all(["gen_a", "gen_b", "gen_c"].map(rowOf))).map((r) => [r.status, r.error_type]),
        [
          ["success", null],
          ["running", null],
          ["failure", "interrupted"],
        ],
      );
      const deliveries = await t.store.db.selectFrom("webhook_deliveries").select(["run_id", "body"])
        .where("run_id", "like", "gen_%").orderBy("run_id").execute();
      assert.deepEqual(deliveries.map((d) => [d.run_id, JSON.parse(d.body).status]), [
        ["gen_a", "success"],
        ["gen_c", "failure"],
      ]);
    });
  });
}
