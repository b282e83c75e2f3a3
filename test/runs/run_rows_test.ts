/**
 * Whole run rows written in batches, on both engines: SQLite takes a multi-row `VALUES`, PostgreSQL one
 * `unnest` of an array per column, so every value must come back as it went in, whatever it holds.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Insertable } from "kysely";
import { insertRuns } from "../../server/runs/_run_rows.ts";
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
  });
}
