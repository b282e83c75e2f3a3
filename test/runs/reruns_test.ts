import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { engines } from "../_helpers/postgres.ts";
import { type AppRef, callRun, getRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

for (const engine of await engines()) {
  describe(`an async run's input, and running it again (${engine})`, () => {
    let t: TestServer;
    let ref: AppRef;

    before(async () => {
      t = await startTestServer({ engine });
      await deployApp(t, "echo", {
        toml: "",
        files: { "main.py": "def run(name='x', n=1):\n    return {'name': name, 'n': n}\n" },
      });
      ref = { client: t.client, project: TEST_PROJECT, app: "echo" };
    });
    after(() => t?.close());

    it("keeps an async run's input with the run; a sync run shows none", async () => {
      const runId = await submitAsync(ref, "run", { body: { name: "ada", n: 2 } });
      const run = await waitForStatus(ref, runId, ["success"]);
      assert.deepEqual(run.input, { name: "ada", n: 2 });
      assert.equal(run.rerun_of, null);
      assert.deepEqual(run.reruns, []);
      const sync = await callRun(ref, "run", { body: { name: "bob" } });
      const syncRun = (await getRun(ref, sync.response.headers.get("x-request-id")!)).data!;
      assert.equal(syncRun.input, null);
    });

    it("links a run made with rerunOf both ways, and refuses a rerunOf of another app", async () => {
      const first = await submitAsync(ref, "run", { body: { name: "ada" } });
      await waitForStatus(ref, first, ["success"]);
      const again = await ref.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
        params: {
          path: { project_id: TEST_PROJECT, app_name: "echo", function_name: "run" },
          query: { async: true, rerunOf: first },
        },
        body: { name: "ada" },
      });
      assert.equal(again.response.status, 202);
      const second = (again.data as { run_id: string }).run_id;
      const done = await waitForStatus(ref, second, ["success"]);
      assert.equal(done.rerun_of, first);
      assert.deepEqual(done.result, { name: "ada", n: 1 });
      const original = await eventually(
        async () => {
          const { data } = await getRun(ref, first);
          return data?.reruns.includes(second) ? data : undefined;
        },
        5_000,
        "the rerun to be listed",
      );
      assert.deepEqual(original.reruns, [second]);
      const wrong = await ref.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
        params: {
          path: { project_id: TEST_PROJECT, app_name: "echo", function_name: "run" },
          query: { async: true, rerunOf: "run_00000000000000000000000000" },
        },
        body: {},
      });
      assert.equal(wrong.response.status, 400);
    });
  });
}

describe("an async run's input expires with its result", () => {
  it("is gone after RUNPLANE_RESULT_TTL", async () => {
    const t = await startTestServer({ env: { RUNPLANE_RESULT_TTL: "1s", RUNPLANE_RUN_LEASE: "3s" } });
    after(() => t.close());
    await deployApp(t, "echo", { toml: "", files: { "main.py": "def run(name='x'):\n    raise ValueError(name)\n" } });
    const ref = { client: t.client, project: TEST_PROJECT, app: "echo" };
    const runId = await submitAsync(ref, "run", { body: { name: "secret-ish" } });
    await waitForStatus(ref, runId, ["failure"]);
    await eventually(
      async () => {
        const row = await t.server.context.store.db.selectFrom("runs").select(["input_json"]).where(
          "run_id",
          "=",
          runId,
        )
          .executeTakeFirstOrThrow();
        return row.input_json === null ? true : undefined;
      },
      15_000,
      "the failed run's input to expire",
    );
    assert.equal((await getRun(ref, runId)).data?.input, null);
  });
});
