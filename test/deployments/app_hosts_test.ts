/**
 * `replicas.hosts` on a single process (SQLite, no cluster): the answering process alone, live, while it
 * has replicas of the app (no advertised URL, `this_host`), with its calls in flight against its slots;
 * empty for an app without replicas. `listApps` shows the same list. An app's `queued_runs` counts its
 * async runs waiting for a slot, and only its own.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { submitAsync, TERMINAL, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const WAIT = `import os, time

def wait(gate):
    while not os.path.exists(gate):
        time.sleep(0.02)
    return 1
`;

describe("replicas per host on a single process", () => {
  let t: TestServer;

  before(async () => {
    t = await startTestServer({
      env: {
        RUNPLANE_GPUS: "GPU-aaa,GPU-bbb",
        RUNPLANE_NVIDIA_SMI: "/nonexistent/nvidia-smi",
        // The function waits for a file the test writes: a jailed replica cannot see it (test/sandbox/ covers the jail).
        RUNPLANE_SANDBOX: "off",
      },
    });
    await deployApp(t, "warm", {
      toml: "[scaling]\nmin_replicas = 1\nmax_replicas = 2\nreplica_concurrency = 3\n",
      files: { "main.py": WAIT },
    });
    await deployApp(t, "cold", { toml: "[scaling]\nmin_replicas = 0\n", files: { "main.py": WAIT } });
    await deployApp(t, "one", {
      toml: "[scaling]\nmin_replicas = 1\nmax_replicas = 1\nreplica_concurrency = 1\n",
      files: { "main.py": WAIT },
    });
    await t.server.context.runtime.warm();
  });
  after(() => t?.close());

  async function getApp(app: string) {
    const { data, response } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}", {
      params: { path: { project_id: TEST_PROJECT, app_id: app } },
    });
    assert.equal(response.status, 200);
    return data!;
  }

  it("lists the answering process alone, with no URL, for an app with a warm replica", async () => {
    const app = await getApp("warm");
    assert.deepEqual(app.replicas.hosts, [{
      host_id: t.server.context.host.id,
      url: null,
      this_host: true,
      starting: 0,
      ready: 1,
      busy: 0,
      slots: 3,
      host_gpus: 2,
    }]);
  });

  it("counts a call in flight as busy against the replica's slots", async () => {
    const gate = join(t.dataDir, `gate-${Date.now()}`);
    const call = t.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
      params: { path: { project_id: TEST_PROJECT, app_name: "warm", function_name: "wait" } },
      body: { gate },
    });
    try {
      await waitFor(async () => (await getApp("warm")).replicas.hosts[0]?.busy === 1, "the call to be in flight");
      const [host] = (await getApp("warm")).replicas.hosts;
      assert.equal(host.ready, 1);
      assert.equal(host.slots, 3);
    } finally {
      await writeFile(gate, "");
    }
    assert.equal((await call).response.status, 200);
  });

  it("is empty for an app with no replica", async () => {
    assert.deepEqual((await getApp("cold")).replicas.hosts, []);
  });

  it("is the same in listApps", async () => {
    const { data, response } = await t.client.GET("/v3/projects/{project_id}/apps", {
      params: { path: { project_id: TEST_PROJECT } },
    });
    assert.equal(response.status, 200);
    const byName = new Map(data!.apps.map((app) => [app.app_id, app.replicas.hosts]));
    assert.equal(byName.get("warm")?.length, 1);
    assert.equal(byName.get("warm")?.[0].this_host, true);
    assert.deepEqual(byName.get("cold"), []);
  });

  it("counts an app's async runs waiting for a slot as its queued_runs, and no other app's", async () => {
    const gate = join(t.dataDir, `gate-queued-${Date.now()}`);
    const ref = { client: t.client, project: TEST_PROJECT, app: "one" };
    const runs = [];
    try {
      // One slot: the first run holds it while the others wait in the queue.
      for (let i = 0; i < 3; i++) runs.push(await submitAsync(ref, "wait", { body: { gate } }));
      await waitFor(async () => (await getApp("one")).queued_runs === 2, "two runs to wait for the slot");
      assert.equal((await getApp("warm")).queued_runs, 0);
      const { data } = await t.client.GET("/v3/projects/{project_id}/apps", {
        params: { path: { project_id: TEST_PROJECT } },
      });
      assert.equal(data!.apps.find((app) => app.app_id === "one")?.queued_runs, 2);
    } finally {
      await writeFile(gate, "");
    }
    for (const runId of runs) assert.equal((await waitForStatus(ref, runId, TERMINAL, 60_000)).status, "success");
    assert.equal((await getApp("one")).queued_runs, 0);
  });
});
