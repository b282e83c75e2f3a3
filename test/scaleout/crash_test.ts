/**
 * kill -9 of one of two processes sharing one PostgreSQL, as on two hosts (each its own temporary dir, so
 * neither finds the other's pid among this host's lease owners): leases decide.
 * Its queued runs run on the other, its running ones end `failure`/`interrupted` once their lease ran
 * out (never re-run), and every due webhook, its pending ones included, is attempted.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { it } from "node:test";
import { SERVER_PID_PY } from "../_helpers/apps.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { type AppRef, getRun, submitAsync, TERMINAL, waitForStatus } from "../_helpers/runs.ts";
import { makeServerDirs, PROCESS_PROJECT, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");

function mainPy(marks: string): string {
  return `import os, time

MARKS = ${JSON.stringify(marks)}

${SERVER_PID_PY}

def slow(run_id, seconds=2.5):
    with open(os.path.join(MARKS, run_id), "a") as f:
        f.write("%d %d\\n" % (os.getpid(), _server_pid()))
    time.sleep(seconds)
    with open(os.path.join(MARKS, run_id + ".end"), "a") as f:
        f.write("end\\n")
    return "done"
`;
}

const TOML = `[deployment]\nname = "q"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\n`;

it(
  "kill -9 of A with runs queued and running and deliveries pending: queued runs run on B, running ones end interrupted after the lease, every webhook is attempted",
  {
    skip: !POSTGRES,
  },
  async () => {
    const defer = deferCleanup();
    const database = await createTestDatabase();
    defer(() => database.drop());
    const dirs = [await makeServerDirs("runplane-crash-a-"), await makeServerDirs("runplane-crash-b-")];
    defer(() => Promise.all(dirs.map((d) => d.remove())));
    const marks = join(dirs[0].root, "marks");
    await mkdir(marks, { recursive: true });
    for (const d of dirs) await d.deploy("q", { "runplane.toml": TOML, "main.py": mainPy(marks) });
    const started = (runId: string) =>
      existsSync(join(marks, runId))
        ? readFileSync(join(marks, runId), "utf8").trim().split("\n").map((line) => Number(line.split(" ")[1]))
        : [];
    const ended = (runId: string) => existsSync(join(marks, `${runId}.end`));

    // Every delivery's first attempt answers 404, so deliveries are pending (retried after 5 s) at the kill.
    const seen = new Map<string, number[]>();
    const receiver = await startWebhookReceiver((_n, request) => {
      const runId = String(request.headers["x-request-id"]);
      const statuses = seen.get(runId) ?? [];
      statuses.push(statuses.length === 0 ? 404 : 200);
      seen.set(runId, statuses);
      return statuses[statuses.length - 1];
    });
    defer(() => receiver.close());
    for (const d of dirs) await mkdir(join(d.root, "tmp"));
    const env = (i: number) => ({
      ...dirs[i].env,
      TMPDIR: join(dirs[i].root, "tmp"),
      RUNPLANE_DATABASE_URL: database.url,
      RUNPLANE_MASTER_KEY: TEST_MASTER_KEY,
      RUNPLANE_RUN_LEASE: "2s",
      RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1",
      RUNPLANE_WEBHOOK_RETRY_DELAY: "5s",
      RUNPLANE_WEBHOOK_TIMEOUT: "1s",
      // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
      RUNPLANE_SANDBOX: "off",
    });
    const a: ServerProcess = await startServerProcess(env(0));
    defer(() => a.kill());
    const b: ServerProcess = await startServerProcess(env(1), { token: a.token });
    defer(() => b.kill());
    const on = (server: ServerProcess): AppRef => ({ client: server.client, project: PROCESS_PROJECT, app: "q" });

    const ids: string[] = [];
    for (let i = 0; i < 24; i++) {
      ids.push(await submitAsync(on(i % 2 === 0 ? a : b), "slow", { webhookEndpoint: receiver.url }));
    }
    const onA = () => ids.filter((id) => started(id).includes(a.child.pid!));
    // Kill A while it holds a delivery whose first attempt failed (pending) and a run that has not ended.
    // A run lasts 2.5 s so that one seen running is still running when the kill lands on a loaded machine
    // (with 1 s, a full suite on a loaded machine saw the run end between the check and the kill).
    await eventually(
      async () => (onA().some((id) => seen.has(id)) && onA().some((id) => !ended(id)) ? true : undefined),
      60_000,
      "A to hold a pending delivery and a running run",
    );
    // The moment the kill is sent: `kill()` resolves once A has exited, later on a loaded machine (a
    // local run measured after it saw a run end 1 s "too early").
    const killedAt = Date.now();
    await a.kill();
    const runningOnA = onA().filter((id) => !ended(id));
    const pendingOfA = onA().filter((id) => seen.get(id)?.length === 1);
    // Queued at the kill: not started anywhere, and still queued in the store. A run A had already taken
    // but whose function had not yet written its mark reads `running` here: it was A's, in flight, and
    // ends as A's running runs do (a loaded CI run once counted such a run as queued).
    const unmarked = ids.filter((id) => started(id).length === 0);
    const statuses = await Promise.all(unmarked.map(async (id) => (await getRun(on(b), id)).data?.status));
    const queuedAtKill = unmarked.filter((_, i) => statuses[i] === "queued");
    assert.ok(runningOnA.length > 0, "A was running runs at the kill");
    assert.ok(pendingOfA.length > 0, "A held pending deliveries at the kill");
    assert.ok(queuedAtKill.length > 0, "runs were still queued at the kill");

    for (const runId of ids) {
      const run = await waitForStatus(on(b), runId, TERMINAL, 120_000);
      assert.ok(started(runId).length <= 1, `${runId} ran at most once`);
      if (runningOnA.includes(runId) && !ended(runId)) {
        assert.equal(run.status, "failure", `${runId}, running on A at the kill`);
        assert.equal(run.error?.type, "interrupted");
        // Ended once its lease (2 s, last renewed at most 2/3 s before the kill) ran out, not before.
        assert.ok(Date.parse(run.completed_at!) >= killedAt + 1_000, `${runId} ended after its lease`);
      }
      if (queuedAtKill.includes(runId)) {
        assert.equal(run.status, "success", `${runId}, queued at the kill (${run.error?.type ?? "no error"})`);
        assert.deepEqual(started(runId), [b.child.pid], `${runId} ran on B`);
      }
    }
    // None lost: every run's webhook got its retry (the 200 after the first 404), A's pending ones included.
    for (const runId of ids) {
      await eventually(
        async () => ((seen.get(runId) ?? []).includes(200) ? true : undefined),
        60_000,
        `${runId}'s webhook to be delivered`,
      );
    }
  },
);
