/**
 * Statements have timeouts: with `RUNPLANE_DATABASE_STATEMENT_TIMEOUT=1s`, an async call whose insert
 * waits on a lock someone else holds answers 503 `store-unavailable` (PostgreSQL cancelled it: 57014)
 * instead of hanging, and the next call after the lock is gone is accepted.
 */
import assert from "node:assert/strict";
import { it } from "node:test";
import pg from "pg";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines } from "../_helpers/postgres.ts";
import { type AppRef, callRun } from "../_helpers/runs.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");

it("a statement past RUNPLANE_DATABASE_STATEMENT_TIMEOUT answers 503 store-unavailable, not a hang", {
  skip: !POSTGRES,
}, async () => {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = await makeServerDirs("runplane-statement-timeout-");
  defer(() => dirs.remove());
  await dirs.deploy("t", { "runplane.toml": `[deployment]\nname = "t"\n`, "main.py": "def f():\n    return 1\n" });
  const server = await startServerProcess({
    ...dirs.env,
    RUNPLANE_DATABASE_URL: database.url,
    RUNPLANE_DATABASE_STATEMENT_TIMEOUT: "1s",
  });
  defer(() => server.kill());
  const ref: AppRef = { client: server.client, project: PROCESS_PROJECT, app: "t" };
  assert.equal((await callRun(ref, "f", { async: true })).response.status, 202);

  const locker = new pg.Client({ connectionString: database.url });
  await locker.connect();
  defer(() => locker.end());
  await locker.query("begin");
  await locker.query("lock table runs in access exclusive mode");
  const startedAt = performance.now();
  const { error, response } = await callRun(ref, "f", { async: true });
  const waitedMs = performance.now() - startedAt;
  await locker.query("rollback");
  assert.equal(response.status, 503, `answered ${response.status} after ${Math.round(waitedMs)} ms`);
  assert.match(String(error?.type), /\/store-unavailable$/);
  assert.ok(response.headers.get("retry-after"));
  // The answer came from the timeout, not from the lock's release (held until the answer came).
  assert.ok(waitedMs < 30_000, `answered after ${Math.round(waitedMs)} ms`);
  const again = await callRun(ref, "f", { async: true });
  assert.equal(again.response.status, 202, "the next call is accepted once the lock is gone");
  assert.equal(server.child.exitCode, null);
});
