import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { type AppRef, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT } from "../_helpers/server.ts";

it("two servers on one data dir (one SQLite file, their own dispatchers and Python workers) run each run exactly once", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-dispatch-"));
  const marks = await mkdtemp(join(tmpdir(), "runplane-marks-"));
  // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
  const a = await startTestServer({ dataDir, env: { RUNPLANE_SANDBOX: "off" } });
  const b = await startTestServer({ dataDir, env: { RUNPLANE_SANDBOX: "off" } });
  after(async () => {
    await a.close();
    await b.close();
    await rm(dataDir, { recursive: true, force: true });
    await rm(marks, { recursive: true, force: true });
  });
  const main = `import os, time\n\ndef work(run_id):\n    with open(os.path.join(${
    JSON.stringify(marks)
  }, run_id), "a") as f:\n        f.write("ran\\n")\n    time.sleep(0.2)\n    return run_id\n`;
  const toml = `[deployment]\nname = "x"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\n`;
  for (const app of ["w0", "w1", "w2"]) await deployApp(a, app, { toml, files: { "main.py": main } });
  await b.server.context.runtime.reload();

  const ids: Array<{ ref: AppRef; runId: string }> = [];
  for (let i = 0; i < 30; i++) {
    // Half the calls arrive at each server; either may claim any of them.
    const t = i % 2 ? a : b;
    const ref = { client: t.client, project: TEST_PROJECT, app: `w${i % 3}` };
    ids.push({ ref, runId: await submitAsync(ref, "work") });
  }
  for (const { ref, runId } of ids) assert.equal((await waitForStatus(ref, runId, ["success"], 60_000)).result, runId);

  const files = readdirSync(marks);
  assert.equal(files.length, 30);
  for (const file of files) assert.equal(readFileSync(join(marks, file), "utf8"), "ran\n", `${file} ran exactly once`);
  const startedBy = (logs: Array<Record<string, unknown>>) =>
    logs.filter((l) => l.msg === "run started" && l.mode === "async").map((l) => String(l.run_id));
  const byA = startedBy(a.logs);
  const byB = startedBy(b.logs);
  assert.equal(byA.length + byB.length, 30, "each run was started by one server");
  assert.deepEqual([...new Set([...byA, ...byB])].sort(), ids.map((r) => r.runId).sort());
  assert.ok(byA.length > 0 && byB.length > 0, `both servers claimed runs (${byA.length}/${byB.length})`);
});
