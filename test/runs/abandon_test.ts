/**
 * The drain timeout gives up what still runs (`abandon`): every run it ends `interrupted` is told like
 * any other end, once: counted in `runplane_runs_finished_total` and logged `run finished`.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Agent, fetch } from "undici";
import { deployApp } from "../_helpers/apps.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { assertMatchesContract } from "../_helpers/contract.ts";
import { engines } from "../_helpers/postgres.ts";
import { type AppRef, listRuns, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT } from "../_helpers/server.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

for (const engine of await engines()) {
  describe(`abandon at the drain timeout (${engine})`, () => {
    it("tells the end of every run it interrupts, async and sync, once each", async () => {
      const defer = deferCleanup();
      const t = await startTestServer({ engine });
      defer(() => t.close());
      await deployApp(t, "stuck", {
        toml: "[deployment]\n\n[scaling]\nreplica_concurrency = 4\n",
        files: { "main.py": "import time\n\ndef stuck():\n    print('started', flush=True)\n    time.sleep(600)\n" },
      });
      const ref: AppRef = { client: t.client, project: TEST_PROJECT, app: "stuck" };
      const asyncRun = await submitAsync(ref, "stuck");
      await waitForStatus(ref, asyncRun, ["running"]);
      // No keep-alive: the drain's close waits for open connections, an idle one included.
      const agent = new Agent({ keepAliveTimeout: 1, keepAliveMaxTimeout: 1 });
      defer(() => agent.close());
      const url = `${t.url}/v4/${TEST_PROJECT}/stuck/stuck`;
      const cut = fetch(url, {
        method: "POST",
        headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
        body: "{}",
        dispatcher: agent,
      });
      const syncRun = await eventually(
        async () => {
          const { data } = await listRuns(ref, { status: "running" });
          return data?.runs.find((r) => r.mode === "sync")?.run_id;
        },
        30_000,
        "the sync call to run",
      );

      // Both functions run (a call still waiting for its replica would be cut as the app going away).
      await eventually(
        async () => t.logs.filter((l) => l.msg === "function output" && l.text === "started").length === 2 || undefined,
        30_000,
        "both functions to start",
      );
      await t.server.drain(200);
      const response = await cut;
      await assertMatchesContract("POST", url, response.clone() as unknown as Response);
      assert.equal(((await response.json()) as { type: string }).type, "https://runplane.dev/problems/interrupted");

      const { values } = await t.server.context.metrics.runsFinished.get();
      const app = `${TEST_PROJECT}/stuck`;
      for (const mode of ["async", "sync"]) {
        const counted = values.filter((v) => v.labels.app === app && v.labels.mode === mode);
        assert.deepEqual(
          counted.map((v) => [v.labels.status, v.value]),
          [["failure", 1]],
          `the interrupted ${mode} run counted once`,
        );
      }
      for (const runId of [asyncRun, syncRun]) {
        const ends = t.logs.filter((l) => l.run_id === runId && String(l.msg).startsWith("run finished"));
        assert.equal(ends.length, 1, `one 'run finished' line for ${runId}: ${JSON.stringify(ends)}`);
        assert.equal(ends[0].status, "failure");
        assert.equal(ends[0].error_type, "interrupted");
      }
    });
  });
}
