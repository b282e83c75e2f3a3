/**
 * The store refusing while async runs start (issue 44): a cluster host must claim a replica seat in
 * PostgreSQL before a cold app's run can reach a replica, and while that claim is refused (the seats
 * table is locked past `RUNPLANE_DATABASE_STATEMENT_TIMEOUT`: PostgreSQL cancels it, 57014) no function
 * has started. Such runs go back on the queue and run once the store answers: none ends `failure` for
 * the store's reason (it used to end `upstream_error`).
 */
import assert from "node:assert/strict";
import { it } from "node:test";
import pg from "pg";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines } from "../_helpers/postgres.ts";
import { type AppRef, type Run, submitAsync, TERMINAL, waitForStatus } from "../_helpers/runs.ts";
import { makeServerDirs, PROCESS_PROJECT, startClusterHost } from "../_helpers/server_process.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");

// Cold: no replica until a run needs one, so each run's start claims a seat first.
const TOML = `[deployment]\nname = "cold"\n\n[scaling]\nmin_replicas = 0\nmax_replicas = 1\n`
  + `replica_concurrency = 2\nresponse_grace_period = 300\n\n[hardware]\ncpu = 0.25\n`;

const RUNS = 8;

it("async runs whose seat claim the store refused run once it answers; none fails for the store's reason", {
  skip: !POSTGRES,
}, async () => {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = await makeServerDirs("runplane-store-refused-");
  defer(() => dirs.remove());
  await dirs.deploy("cold", { "runplane.toml": TOML, "main.py": "def f(n=0):\n    return n\n" });
  const host = await startClusterHost(dirs, {
    databaseUrl: database.url,
    env: { RUNPLANE_DATABASE_STATEMENT_TIMEOUT: "1s" },
  });
  defer(() => host.kill());
  const ref: AppRef = { client: host.client, project: PROCESS_PROJECT, app: "cold" };

  const locker = new pg.Client({ connectionString: database.url });
  await locker.connect();
  defer(() => locker.end());
  // Reads of the seats go on (the cluster's view); a claim waits on the lock until PostgreSQL cancels it.
  await locker.query("begin");
  await locker.query("lock table replica_seats in exclusive mode");
  const ids: string[] = [];
  for (let i = 0; i < RUNS; i++) ids.push(await submitAsync(ref, "f", { body: { n: i } }));
  // Until a run's start was refused: it was put back (or, before issue 44, it ended).
  await eventually(
    async () =>
      host.logs.some((line) =>
        ids.includes(String(line.run_id))
        && (String(line.msg).includes("put back on the queue") || line.msg === "run finished")
      ) || undefined,
    60_000,
    "a run's start to be refused by the store",
  );
  await locker.query("rollback");

  const runs: Run[] = [];
  for (const runId of ids) runs.push(await waitForStatus(ref, runId, TERMINAL, 120_000));
  const failed = runs.filter((run) => run.status !== "success");
  console.error(
    `store refused: ${runs.length} accepted runs, ${failed.length} not success: ${
      JSON.stringify(failed.map((run) => [run.error?.type, run.error?.message]))
    }`,
  );
  assert.deepEqual(failed.map((run) => `${run.run_id}: ${run.status} ${run.error?.type}: ${run.error?.message}`), []);
  runs.forEach((run, i) => assert.equal(run.result, i, `${run.run_id} ran with its own input`));
});
