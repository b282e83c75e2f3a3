/**
 * Two real server processes ("hosts": each its own data dir, apps dir and port) sharing one PostgreSQL
 * database and master key: async runs spread over both and run once each, records are the same from
 * either, a cancel reaches the process running the run, one Idempotency-Key makes one run, and a
 * revoked token is refused by both.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SERVER_PID_PY } from "../_helpers/apps.ts";
import { runMain } from "../_helpers/cli.ts";
import { createTestClient } from "../_helpers/client.ts";
import { createTestDatabase, engines, TEST_MASTER_KEY, type TestDatabase } from "../_helpers/postgres.ts";
import { type AppRef, callRun, cancelRun, getRun, listRuns, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startServerProcess,
} from "../_helpers/server_process.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");

/** The app both hosts serve: each execution appends "<worker pid> <server pid>" to its run's marker file. */
function mainPy(marks: string): string {
  return `import os, time

MARKS = ${JSON.stringify(marks)}

${SERVER_PID_PY}

def _mark(run_id):
    with open(os.path.join(MARKS, run_id), "a") as f:
        f.write("%d %d\\n" % (os.getpid(), _server_pid()))

def quick(run_id, **kw):
    _mark(run_id)
    return {"server": _server_pid()}

def hang(run_id):
    _mark(run_id)
    while True:
        with open(os.path.join(MARKS, run_id + ".beat"), "a") as f:
            f.write(".")
        time.sleep(0.05)
`;
}

const TOML =
  `[deployment]\nname = "w"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 8\nresponse_grace_period = 120\n`;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe("two processes sharing one PostgreSQL: runs, records, cancel, idempotency, revocation", {
  skip: !POSTGRES,
}, () => {
  let database: TestDatabase;
  let marks: string;
  const dirs: ServerDirs[] = [];
  let a: ServerProcess;
  let b: ServerProcess;
  const on = (server: ServerProcess): AppRef => ({ client: server.client, project: PROCESS_PROJECT, app: "w" });
  const executions = (runId: string): Array<{ worker: number; server: number }> =>
    existsSync(join(marks, runId))
      ? readFileSync(join(marks, runId), "utf8").trim().split("\n").map((line) => {
        const [worker, server] = line.split(" ").map(Number);
        return { worker, server };
      })
      : [];
  const beats = (runId: string) =>
    existsSync(join(marks, `${runId}.beat`)) ? statSync(join(marks, `${runId}.beat`)).size : 0;

  before(async () => {
    database = await createTestDatabase();
    for (const name of ["a", "b"]) dirs.push(await makeServerDirs(`runplane-scaleout-${name}-`));
    marks = join(dirs[0].root, "marks");
    await mkdir(marks, { recursive: true });
    for (const d of dirs) await d.deploy("w", { "runplane.toml": TOML, "main.py": mainPy(marks) });
    const env = (d: ServerDirs) => ({
      ...d.env,
      RUNPLANE_DATABASE_URL: database.url,
      RUNPLANE_MASTER_KEY: TEST_MASTER_KEY,
      RUNPLANE_RUN_LEASE: "3s",
      // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
      RUNPLANE_SANDBOX: "off",
    });
    a = await startServerProcess(env(dirs[0]));
    b = await startServerProcess(env(dirs[1]), { token: a.token });
  });
  after(async () => {
    await a?.kill();
    await b?.kill();
    await database?.drop();
    for (const d of dirs) await d.remove();
  });

  it("200 async runs submitted round-robin to A and B all end success, each run exactly once, on both processes", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 200; i += 20) {
      ids.push(
        ...(await Promise.all(
          Array.from({ length: 20 }, (_, j) => submitAsync(on((i + j) % 2 === 0 ? a : b), "quick")),
        )),
      );
    }
    assert.equal(new Set(ids).size, 200);
    const servers = new Set<number>();
    for (const runId of ids) {
      const run = await waitForStatus(on(b), runId, ["success", "failure", "cancelled"], 120_000);
      assert.equal(run.status, "success", `${runId} ended ${run.status}`);
      const ran = executions(runId);
      assert.equal(ran.length, 1, `${runId} ran ${ran.length} times`);
      assert.deepEqual(run.result, { server: ran[0].server });
      servers.add(ran[0].server);
    }
    assert.deepEqual(
      [...servers].sort(),
      [a.child.pid, b.child.pid].sort(),
      "both server processes executed runs",
    );
  });

  it("shows a run submitted on A on B with the same record", async () => {
    const runId = await submitAsync(on(a), "quick", { body: { tag: "seen-from-b" } });
    const onB = await eventually(async () => (await getRun(on(b), runId)).data, 10_000, "the run on B");
    assert.equal(onB.run_id, runId);
    await waitForStatus(on(a), runId, ["success"], 30_000);
    const [fromA, fromB] = await Promise.all([getRun(on(a), runId), getRun(on(b), runId)]);
    assert.equal(fromA.response.status, 200);
    assert.deepEqual(fromB.data, fromA.data);
  });

  it("cancels on one process a run running on the other: it ends cancelled within seconds and its function stops", async () => {
    const runId = await submitAsync(on(a), "hang");
    await eventually(async () => (beats(runId) > 0 ? true : undefined), 30_000, "the function to run");
    const [{ server }] = executions(runId);
    const [owner, other] = server === a.child.pid ? [a, b] : [b, a];
    assert.equal(owner.child.pid, server, "the run executes on one of the two processes");
    const asked = Date.now();
    const { response } = await cancelRun(on(other), runId);
    assert.equal(response.status, 200);
    const run = await waitForStatus(on(other), runId, ["cancelled", "failure", "success"], 10_000);
    assert.equal(run.status, "cancelled");
    assert.ok(Date.now() - asked < 10_000);
    // The function ignores the cancel (a `def` in a loop): its replica is killed a grace second after the
    // cancel reached it, which a loaded host may make later than a second after the record said cancelled.
    await eventually(
      async () => {
        const size = beats(runId);
        await sleep(1000);
        return beats(runId) === size ? true : undefined;
      },
      15_000,
      "the function to stop",
    );
    // Recorded once: still cancelled, on both, after the owner's lease renewals went by.
    await sleep(1500);
    for (const server of [a, b]) assert.equal((await getRun(on(server), runId)).data?.status, "cancelled");
    assert.equal(executions(runId).length, 1);
  });

  it("makes one run of the same Idempotency-Key sent to A and B at the same instant", async () => {
    for (let round = 0; round < 10; round++) {
      const key = `same-instant-${round}`;
      const [fromA, fromB] = await Promise.all(
        [a, b].map((server) => callRun(on(server), "quick", { async: true, idempotencyKey: key, body: { round } })),
      );
      assert.equal(fromA.response.status, 202);
      assert.equal(fromB.response.status, 202);
      const runId = (fromA.data as { run_id: string }).run_id;
      assert.equal((fromB.data as { run_id: string }).run_id, runId, `round ${round}: one run`);
      await waitForStatus(on(a), runId, ["success"], 30_000);
      assert.equal(executions(runId).length, 1);
    }
  });

  it("refuses on A, at its next call, a token revoked through the CLI against the database (and on B)", async () => {
    const cli = { env: { RUNPLANE_DATABASE_URL: database.url, RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } };
    const created = await runMain(
      ["service-account", "create", "--project", PROCESS_PROJECT, "--name", "revoked", "--expires", "1d", "--json"],
      cli,
    );
    assert.equal(created.code, 0, created.stderr);
    const { id, token } = JSON.parse(created.stdout) as { id: string; token: string };
    const statusOn = async (server: ServerProcess) =>
      (await listRuns({ client: createTestClient(server.url, token), project: PROCESS_PROJECT, app: "w" }, {
        limit: 1,
      }))
        .response.status;
    assert.equal(await statusOn(a), 200);
    assert.equal(await statusOn(b), 200);
    const revoked = await runMain(["service-account", "revoke", id], cli);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.equal(await statusOn(a), 401);
    assert.equal(await statusOn(b), 401);
  });
});
