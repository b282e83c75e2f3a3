/**
 * The host's budget (RUNPLANE_HOST_CPU, RUNPLANE_HOST_MEMORY) reserved by each replica's `[hardware]`, and
 * the project replica limit (RUNPLANE_PROJECT_REPLICA_LIMIT): real servers, processes and deployments.
 */
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { packBundle } from "../../client/bundle.ts";
import { alive, callFunction, deployApp, hostPid, waitFor, writeApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `
import os, time

def pid():
    return os.getpid()

def hold(seconds):
    time.sleep(seconds)
    return os.getpid()
`;

type Problem = { type: string; status: number; detail?: string };

/** `runplane_replicas_waiting_for_capacity` for `app`, as /metrics says it now. */
async function waitingForCapacity(t: TestServer, app: string): Promise<number> {
  const text = await (await checkedFetch(`${t.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`runplane_replicas_waiting_for_capacity{app="${app}"}`));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

describe("the host's budget", () => {
  let t: TestServer;
  let firstDir: string;
  before(async () => {
    t = await startTestServer({
      env: { RUNPLANE_HOST_MEMORY: "1gb", RUNPLANE_HOST_CPU: "4", RUNPLANE_APP_QUEUE_LIMIT: "1" },
    });
    // Each asks more than half the host's memory: one replica of either fits, never both at once.
    const toml = "[scaling]\nmax_replicas = 1\ncooldown = 600\n[hardware]\nmemory = 0.75\ncpu = 0.5\n";
    firstDir = await deployApp(t, "first", { toml, files: { "main.py": MAIN } });
    await deployApp(t, "second", { toml, files: { "main.py": MAIN } });
  });
  after(() => t.close());

  it("holds a replica that does not fit until the other app's replica ends; calls past the queue get 429", async () => {
    const firstPid = hostPid(firstDir, (await callFunction(t, "first", "pid")).data!.result as number);
    const holding = callFunction(t, "first", "hold", { seconds: 3 });
    await waitFor(() => t.server.context.runtime.capacity(TEST_PROJECT, "first").busy === 1, "the first call to run");
    const first = t.logs.find((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/first`);
    assert.ok(first, "the first app's replica started");
    assert.deepEqual(t.server.context.runtime.hostCapacity().reserved, { cpu: 0.5, memoryBytes: 0.75 * 1024 ** 3 });

    const waiting = callFunction(t, "second", "pid");
    await waitFor(
      () => t.server.context.runtime.capacity(TEST_PROJECT, "second").queued === 1,
      "the second app's call to wait",
    );
    assert.equal(await waitingForCapacity(t, `${TEST_PROJECT}/second`), 1, "the metric says the second app waits");
    assert.ok(t.logs.some((l) => l.msg === "replica waits for host capacity" && l.app === `${TEST_PROJECT}/second`));
    assert.ok(!t.logs.some((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/second`));

    // The queue holds one call (RUNPLANE_APP_QUEUE_LIMIT=1): the next gets 429 with Retry-After.
    const refused = await callFunction(t, "second", "pid");
    assert.equal(refused.response.status, 429);
    assert.ok(refused.response.headers.get("Retry-After"));

    // Still waiting while the first app's call runs.
    await sleep(500);
    assert.equal(t.server.context.runtime.capacity(TEST_PROJECT, "second").queued, 1);

    const held = await holding;
    assert.equal(held.response.status, 200);
    // The first app's replica, idle now, is stopped for the app that waits, which then runs.
    const served = await waiting;
    assert.equal(served.response.status, 200, JSON.stringify(served.error));
    const stopped = t.logs.findIndex((l) =>
      l.msg === "replica stopping" && l.app === `${TEST_PROJECT}/first` && l.reason === "making room for another app"
    );
    const started = t.logs.findIndex((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/second`);
    assert.ok(stopped >= 0 && started > stopped, "the first app's replica was stopped before the second's started");
    await waitFor(() => !alive(firstPid), "the first app's worker to be gone");
    assert.equal(await waitingForCapacity(t, `${TEST_PROJECT}/second`), 0);
    assert.equal(t.server.context.runtime.capacity(TEST_PROJECT, "first").replicas, 0);
  });

  it("refuses an app whose one replica is larger than the whole budget (503 naming the setting)", async () => {
    await deployApp(t, "huge", { toml: "[hardware]\nmemory = 2\n", files: { "main.py": MAIN } });
    const { response, error } = await callFunction(t, "huge", "pid");
    assert.equal(response.status, 503);
    assert.match(
      (error as Problem).detail ?? "",
      /memory = 2 GiB is more than this host's RUNPLANE_HOST_MEMORY \(1 GiB\)/,
    );
  });
});

describe("the project replica limit", () => {
  let t: TestServer;
  let token: string;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_PROJECT_REPLICA_LIMIT: "4" } });
    token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
  });
  after(() => t.close());

  async function deploy(app: string, toml: string): Promise<Response> {
    const dir = await writeApp(`${t.dataDir}/bundles`, app, {
      project: TEST_PROJECT,
      files: { "runplane.toml": toml, "main.py": MAIN },
    });
    try {
      return await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${app}/deployments`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/gzip" },
        body: new Uint8Array((await packBundle(dir)).bytes),
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  it("refuses a deployment asking more than the limit with 400 naming it", async () => {
    const response = await deploy("wide", "[scaling]\nmax_replicas = 5\n");
    const problem = (await response.json()) as Problem;
    assert.equal(response.status, 400, JSON.stringify(problem));
    assert.match(problem.detail ?? "", /would ask for 5 replicas .*RUNPLANE_PROJECT_REPLICA_LIMIT of 4/);
  });

  it("counts the project's other apps: a folder app past the sum gets 503 naming the limit, until room is made", async () => {
    await deployApp(t, "a", { toml: "[scaling]\nmax_replicas = 3\n", files: { "main.py": MAIN } });
    assert.equal((await callFunction(t, "a", "pid")).response.status, 200);

    const deployed = await deploy("c", "[scaling]\nmax_replicas = 2\n");
    const refusal = (await deployed.json()) as Problem;
    assert.equal(deployed.status, 400, JSON.stringify(refusal));
    assert.match(refusal.detail ?? "", /would ask for 5 replicas .*RUNPLANE_PROJECT_REPLICA_LIMIT of 4/);

    await deployApp(t, "b", { toml: "[scaling]\nmax_replicas = 2\n", files: { "main.py": MAIN } });
    const { response, error } = await callFunction(t, "b", "pid");
    assert.equal(response.status, 503);
    assert.equal((error as Problem).type, "https://runplane.dev/problems/app-unavailable");
    assert.match((error as Problem).detail ?? "", /RUNPLANE_PROJECT_REPLICA_LIMIT of 4/);
    // Another project is not counted with this one.
    await deployApp(t, "b", { project: "p-other", toml: "[scaling]\nmax_replicas = 2\n", files: { "main.py": MAIN } });
    assert.equal(t.server.context.runtime.apps("p-other")[0].error, undefined);

    // a shrinks: b fits and is served.
    await deployApp(t, "a", { toml: "[scaling]\nmax_replicas = 1\n", files: { "main.py": MAIN } });
    await waitFor(async () => {
      await t.server.context.runtime.reload();
      return t.server.context.runtime.apps(TEST_PROJECT).find((app) => app.name === "b")?.error === undefined;
    }, "b to be served");
    assert.equal((await callFunction(t, "b", "pid")).response.status, 200);
  });
});
