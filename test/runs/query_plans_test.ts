/**
 * No statement of the run, outbox and log paths reads a growing table whole. Every statement the real
 * functions run is captured (`onStatement`) and explained on both engines: SQLite's plan may not `SCAN`
 * a growing table (a `SEARCH` through an index is what we want); PostgreSQL, with sequential scans
 * priced out (`enable_seqscan = off`, so a tiny table's cheap scan does not hide a missing index), may
 * not show a `Seq Scan` of one, neither in the plan made for the statement's values nor in the generic
 * plan a prepared statement may switch to after five runs (the server prepares its raw statements).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CompiledQuery } from "kysely";
import { purgeExpiredRuns } from "../../server/runs/_retention.ts";
import { runEnd } from "../../server/runs/_run_end.ts";
import {
  appsWithQueuedRuns,
  claimQueuedRuns,
  expireResults,
  finishLeasedRuns,
  queuedRunsByApp,
  renewLeases,
  selectReruns,
  selectRun,
  selectRunPage,
  selectRunsOf,
  selectStaleRuns,
} from "../../server/runs/_queries.ts";
import { deleteRunLogsOf, expireRunLogs, readRunLog } from "../../server/runs/run_logs.ts";
import { IDEMPOTENCY_WINDOW_MS } from "../../server/runs/_idempotency.ts";
import {
  claimDueDeliveries,
  deleteDeliveriesOf,
  forgetDeliverySecrets,
  postponeDue,
  restoreDue,
  releaseDeliveryLeases,
  webhookViews,
} from "../../server/webhooks/outbox.ts";
import {
  expireAppSamples,
  selectAppLogPage,
  selectRunBuckets,
  selectRunLinesAfter,
  selectSampleBuckets,
  selectWatchedRuns,
  upsertAppSample,
} from "../../server/store/statements/app_insights.ts";
import { engines, openTestStore, type TestStore } from "../_helpers/postgres.ts";

/** The project-wide listings (`listProjectRuns`), unfiltered and with each filter. */
const PROJECT_PAGES = [
  { projectId: "p", limit: 51 },
  { projectId: "p", status: "failure" as const, limit: 51 },
  { projectId: "p", functionName: "f", mode: "async" as const, limit: 51 },
  { projectId: "p", createdAfter: 1, createdBefore: 2, limit: 51 },
];

/** Tables that grow with the work: a whole read of one costs more every day. */
const GROWING = ["runs", "webhook_deliveries", "webhook_attempts", "run_logs", "idempotency_keys", "app_samples"];

interface Statement {
  sql: string;
  parameters: readonly unknown[];
}

/** The growing tables `plan` reads whole, by name. */
function fullScans(engine: string, plan: string[]): string[] {
  const found: string[] = [];
  for (const line of plan) {
    const table = engine === "sqlite"
      ? /^SCAN (\w+)/.exec(line)?.[1]
      : /Seq Scan on "?(\w+)"?/.exec(line)?.[1];
    if (table && GROWING.includes(table)) found.push(line.trim());
  }
  return found;
}

/**
 * PostgreSQL's generic plan of `statement`: the plan a prepared statement is run with once PostgreSQL
 * finds it no dearer than the plans made for each call's values (it ignores the values, so NULLs do).
 */
async function genericPlan(db: TestStore["store"]["db"], statement: Statement): Promise<string[]> {
  return await db.transaction().execute(async (trx) => {
    await trx.executeQuery(CompiledQuery.raw("set local enable_seqscan = off"));
    await trx.executeQuery(CompiledQuery.raw("set local plan_cache_mode = force_generic_plan"));
    await trx.executeQuery(CompiledQuery.raw(`prepare "generic" as ${statement.sql}`));
    const nulls = statement.parameters.map(() => "null").join(", ");
    const result = await trx.executeQuery<Record<string, unknown>>(
      CompiledQuery.raw(`explain execute "generic"${nulls ? `(${nulls})` : ""}`),
    );
    await trx.executeQuery(CompiledQuery.raw(`deallocate "generic"`));
    return result.rows.map((r) => String(r["QUERY PLAN"]));
  });
}

/** The plan of `statement` as its engine explains it (PostgreSQL's with sequential scans priced out). */
async function explained(
  db: TestStore["store"]["db"],
  options: { engine: string; statement: Statement },
): Promise<string[]> {
  const { engine, statement } = options;
  return await db.transaction().execute(async (trx) => {
    if (engine === "postgres") await trx.executeQuery(CompiledQuery.raw("set local enable_seqscan = off"));
    const explain = engine === "sqlite" ? "explain query plan " : "explain ";
    const result = await trx.executeQuery<Record<string, unknown>>(
      CompiledQuery.raw(explain + statement.sql, [...statement.parameters]),
    );
    return result.rows.map((r) => String(engine === "sqlite" ? r.detail : r["QUERY PLAN"]));
  });
}

for (const engine of await engines()) {
  describe(`query plans (${engine})`, () => {
    let t: TestStore;
    const seen: Statement[] = [];
    before(async () => {
      t = await openTestStore(engine, { onStatement: (statement) => seen.push(statement) });
    });
    after(() => t?.close());

    it("every statement of the hot and upkeep paths reads growing tables through an index", async () => {
      const { db } = t.store;
      const now = Date.now();
      seen.length = 0;
      // The paths, each as the server runs it.
      const ref = { projectId: "p", appId: "a", runId: "run_00000000000000000000000001" };
      await selectRun(db, ref);
      await selectRunPage(db, { projectId: "p", appId: "a", limit: 51 });
      await selectRunPage(db, { projectId: "p", appId: "a", status: "failure", limit: 51 });
      await selectRunPage(db, { projectId: "p", appId: "a", before: ref.runId, limit: 51 });
      await selectRunPage(db, { projectId: "p", appId: "a", status: "queued", before: ref.runId, limit: 51 });
      for (const where of PROJECT_PAGES) await selectRunPage(db, { ...where, before: ref.runId });
      await selectReruns(db, ref.runId);
      await appsWithQueuedRuns(db);
      await queuedRunsByApp(db);
      await claimQueuedRuns(db, { projectId: "p", appId: "a", owner: "o", leaseMs: 30_000, limit: 4, now });
      await renewLeases(db, { owner: "o", leaseMs: 30_000, now });
      const leased = {
        project_id: "p",
        app_id: "a",
        function_name: "f",
        mode: "async" as const,
        webhook_endpoint: null,
        webhook_secret: null,
        webhook_credentials: null,
        started_at: now,
      };
      await finishLeasedRuns(db, "o", [
        runEnd({ ...leased, run_id: ref.runId }, { status: "cancelled" }, { now }),
        runEnd({ ...leased, run_id: "run_00000000000000000000000002" }, { status: "cancelled" }, { now }),
      ]);
      await selectStaleRuns(db, now);
      await selectRunsOf(db, "o");
      await expireResults(db, { resultTtlMs: 86_400_000, now });
      await purgeExpiredRuns(db, { retentionMs: 30 * 86_400_000, resultTtlMs: 86_400_000, now, pauseMs: 0 });
      await deleteRunLogsOf(db, [ref.runId]);
      await deleteDeliveriesOf(db, [ref.runId]);
      await readRunLog(db, { runId: ref.runId });
      await expireRunLogs(db, { before: now - 86_400_000 });
      await claimDueDeliveries(db, { owner: "o", now, leaseMs: 20_000, limit: 32, skipEndpoints: ["https://x/"] });
      await forgetDeliverySecrets(db, { before: now - 86_400_000 });
      await postponeDue(db, { endpoints: ["https://x/"], now, dueAt: now + 10_000 });
      await restoreDue(db, { endpoints: ["https://x/"], postponedTo: now + 10_000, now });
      await releaseDeliveryLeases(db, "o");
      await webhookViews(db, [ref.runId]);
      // An app's log tail and activity (getAppLogs, getAppStats) and the hosts' samples.
      const app = { projectId: "p", appId: "a" };
      const hour = { from: now - 3_600_000, to: now, bucketMs: 60_000 };
      const position = { since: hour.from, at: hour.from - 1, runId: "", seq: 0 };
      await selectAppLogPage(db, { ...app, position, limit: 201 });
      await selectWatchedRuns(db, { ...app, endedSince: now - 30_000, limit: 200 });
      await selectRunLinesAfter(db, { runId: ref.runId, afterSeq: 0, since: hour.from, limit: 1000 });
      await selectRunBuckets(db, { ...app, ...hour });
      await selectSampleBuckets(db, { ...app, ...hour });
      await upsertAppSample(db, { ...app, hostId: "h", minute: now - (now % 60_000), replicas: 1, starts: 1 });
      await expireAppSamples(db, now - 86_400_000);
      await db.deleteFrom("idempotency_keys").where("created_at", "<=", now - IDEMPOTENCY_WINDOW_MS).execute();

      // Transaction control (`begin`, `commit`) has no plan.
      const statements = [...new Map(seen.map((s) => [s.sql, s])).values()]
        .filter((s) => !/^(begin|commit|rollback)\b/i.test(s.sql));
      assert.ok(statements.length >= 20, `captured ${statements.length} statements`);
      const problems: string[] = [];
      for (const statement of statements) {
        const plan = await explained(db, { engine, statement });
        for (const scan of fullScans(engine, plan)) problems.push(`${scan}\n    in: ${statement.sql}`);
        if (engine === "postgres") {
          for (const scan of fullScans(engine, await genericPlan(db, statement))) {
            problems.push(`${scan} (generic plan)\n    in: ${statement.sql}`);
          }
        }
      }
      assert.deepEqual(problems, [], `full scans of growing tables:\n${problems.join("\n")}`);
    });

    it("reads a project's page of runs in index order, never sorting all of the project's runs", async () => {
      const { db } = t.store;
      seen.length = 0;
      for (const where of PROJECT_PAGES) await selectRunPage(db, where);
      const statements = seen.splice(0);
      const sorts: string[] = [];
      for (const statement of statements) {
        const plan = await explained(db, { engine, statement });
        const sort = plan.find((line) => /TEMP B-TREE|^\s*(->\s*)?Sort\b/.test(line));
        if (sort) sorts.push(`${sort.trim()}\n    in: ${statement.sql}`);
      }
      assert.equal(statements.length, PROJECT_PAGES.length);
      assert.deepEqual(sorts, [], `sorted instead of walking an index:\n${sorts.join("\n")}`);
    });
  });
}
