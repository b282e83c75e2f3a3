import assert from "node:assert/strict";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Agent, request } from "node:http";
import { createTestClient } from "../_helpers/client.ts";
import { assertMatchesContract } from "../_helpers/contract.ts";
import { waitFor } from "../_helpers/apps.ts";
import { startTestServer, TEST_PROJECT } from "../_helpers/server.ts";
import { openStore } from "../../server/store/mod.ts";

/** A request on `agent` (so on a connection opened before), checked against the contract. */
function requestOn(
  agent: Agent,
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, method: init.method ?? "GET", headers: init.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(res.headers)) {
          if (typeof value === "string") headers.set(name, value);
        }
        const response = new Response(Buffer.concat(chunks), { status: res.statusCode, headers });
        assertMatchesContract(init.method ?? "GET", url, response).then(() => resolve(response), reject);
      });
    });
    req.on("error", reject);
    req.end(init.body);
  });
}

describe("GET /readyz", () => {
  it("is 503 while apps load (min_replicas warming up), then 200", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "runplane-ready-"));
    const app = join(dataDir, "apps", TEST_PROJECT, "slow-start");
    await mkdir(app, { recursive: true });
    await writeFile(join(app, "runplane.toml"), "[scaling]\nmin_replicas = 1\n");
    await writeFile(join(app, "main.py"), "import time\ntime.sleep(3)\n\ndef run():\n    return 1\n");
    const t = await startTestServer({ dataDir });
    try {
      const client = createTestClient(t.url);
      const early = await client.GET("/readyz");
      assert.equal(early.response.status, 503);
      assert.match(early.error?.detail ?? "", /apps are loading/);
      assert.equal(early.response.headers.get("retry-after"), "1");
      const live = await client.GET("/healthz");
      assert.equal(live.response.status, 200, "alive while not ready");
      await waitFor(async () => (await client.GET("/readyz")).response.status === 200, "readiness", 30_000);
    } finally {
      await t.close();
    }
  });

  it("is 503 while draining, and new calls get 503 with Retry-After while an in-flight call finishes", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "runplane-ready-"));
    const app = join(dataDir, "apps", TEST_PROJECT, "sleepy");
    await mkdir(app, { recursive: true });
    await writeFile(join(app, "runplane.toml"), "[scaling]\nmax_replicas = 2\n");
    await writeFile(
      join(app, "main.py"),
      "import time\n\ndef run(seconds=0):\n    time.sleep(seconds)\n    return 'slept'\n",
    );
    const t = await startTestServer({ dataDir });
    const client = createTestClient(t.url, t.token);
    const call = (seconds: number) =>
      client.POST("/v4/{project_id}/{app_name}/{function_name}", {
        params: { path: { project_id: TEST_PROJECT, app_name: "sleepy", function_name: "run" } },
        body: { seconds },
      });
    // Connections opened before the drain: a stopping server takes no new ones.
    const probeAgent = new Agent({ keepAlive: true, maxSockets: 1 });
    const callAgent = new Agent({ keepAlive: true, maxSockets: 1 });
    await waitFor(async () => (await requestOn(probeAgent, `${t.url}/readyz`)).status === 200, "readiness", 30_000);
    const callUrl = `${t.url}/v4/${TEST_PROJECT}/sleepy/run`;
    const headers = { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" };
    assert.equal((await requestOn(callAgent, callUrl, { method: "POST", headers, body: "{}" })).status, 200);
    const inFlight = call(2);
    await waitFor(
      () => t.server.context.runtime.capacity(TEST_PROJECT, "sleepy").busy === 1,
      "the call to start",
      20_000,
    );
    const drained = t.server.drain(20_000);
    const ready = await requestOn(probeAgent, `${t.url}/readyz`);
    assert.equal(ready.status, 503);
    assert.match(((await ready.json()) as { detail: string }).detail, /draining/);
    const refused = await requestOn(callAgent, callUrl, { method: "POST", headers, body: "{}" });
    assert.equal(refused.status, 503);
    assert.equal(refused.headers.get("retry-after"), "5");
    assert.equal(refused.headers.get("connection"), "close");
    const finished = await inFlight;
    assert.equal(finished.response.status, 200, "the in-flight call finished");
    assert.equal((finished.data as { result: unknown }).result, "slept");
    await drained;
  });
});

describe("drain", () => {
  it("called again while draining stops waiting: a still-running async run ends interrupted and the server stops", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "runplane-drain-"));
    const app = join(dataDir, "apps", TEST_PROJECT, "long");
    await mkdir(app, { recursive: true });
    await writeFile(join(app, "runplane.toml"), "");
    await writeFile(join(app, "main.py"), "import time\n\ndef run():\n    time.sleep(600)\n");
    const t = await startTestServer({ dataDir });
    const accepted = await t.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
      params: { path: { project_id: TEST_PROJECT, app_name: "long", function_name: "run" }, query: { async: true } },
      body: {},
    });
    assert.equal(accepted.response.status, 202);
    const runId = (accepted.data as { run_id: string }).run_id;
    await waitFor(
      async () => {
        const run = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
          params: { path: { project_id: TEST_PROJECT, app_id: "long", run_id: runId } },
        });
        return run.data?.status === "running";
      },
      "the async run to start",
      20_000,
    );
    // The first drain would wait for the 600 s function; the second (a second Ctrl-C) stops the wait.
    const drained = t.server.drain(900_000);
    await waitFor(() => t.logs.some((entry) => String(entry.msg).startsWith("draining")), "the drain to start");
    const again = t.server.drain();
    await Promise.all([drained, again]);
    assert.ok(t.logs.some((entry) => entry.msg === "drain cut short; stopping what still runs"));
    const store = await openStore(dataDir);
    try {
      const row = await store.db.selectFrom("runs").select(["status", "error_type"]).where("run_id", "=", runId)
        .executeTakeFirstOrThrow();
      assert.equal(row.status, "failure");
      assert.equal(row.error_type, "interrupted");
    } finally {
      await store.close();
    }
  });
});
