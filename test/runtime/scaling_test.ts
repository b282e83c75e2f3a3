import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { alive, callFunction, deployApp, hostPid, replicaPid, waitFor } from "../_helpers/apps.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `
import os, time, uuid

worker = None

def work(n, pause=0.3):
    # When the call ran, on the host's clock (jailed replicas share no folder to count in), and in which
    # worker process (each replica's pid namespace numbers its worker alike).
    global worker
    worker = worker or uuid.uuid4().hex
    started = time.time()
    time.sleep(pause)
    return {"square": n * n, "started": started, "ended": time.time(), "worker": worker}

def pid():
    return os.getpid()

def sleepy(seconds):
    time.sleep(seconds)
    return "woke"
`;

function pidOf(data: { result: unknown } | undefined): number {
  return data!.result as number;
}

/** The most calls whose `[started, ended]` overlap at one instant (an end before a start at the same time). */
function mostAtOnce(calls: Array<{ started: number; ended: number }>): number {
  const events = calls.flatMap((c) => [{ at: c.started, step: 1 }, { at: c.ended, step: -1 }]);
  events.sort((a, b) => a.at - b.at || a.step - b.step);
  let running = 0;
  let most = 0;
  for (const event of events) {
    running += event.step;
    most = Math.max(most, running);
  }
  return most;
}

describe("replicas and slots", () => {
  let t: TestServer;
  let coolDir: string;
  let warmDir: string;
  before(async () => {
    t = await startTestServer();
    const files = { "main.py": MAIN };
    await deployApp(t, "wide", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurrency = 4\ncooldown = 60\n",
      files,
    });
    coolDir = await deployApp(t, "cool", { toml: "[scaling]\nmax_replicas = 1\ncooldown = 1\n", files });
    warmDir = await deployApp(t, "warm", {
      toml: "[scaling]\nmin_replicas = 1\nmax_replicas = 2\ncooldown = 0.5\n",
      files,
    });
  });
  after(() => t.close());

  it("runs 50 concurrent calls with the right results and never more than 8 at once", async () => {
    const runtime = t.server.context.runtime;
    let busiest = 0;
    const sampler = setInterval(() => (busiest = Math.max(busiest, runtime.capacity(TEST_PROJECT, "wide").busy)), 5);
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, n) => callFunction(t, "wide", "work", { n })),
    );
    clearInterval(sampler);
    answers.forEach((answer, n) => {
      assert.equal(answer.response.status, 200);
      assert.equal((answer.data!.result as { square: number }).square, n * n);
    });
    const seen = mostAtOnce(answers.map((a) => a.data!.result as { started: number; ended: number }));
    assert.ok(seen <= 8, `${seen} calls ran at once in Python`);
    assert.ok(seen >= 4, `only ${seen} calls ran at once: the slots are not used`);
    assert.ok(busiest <= 8, `${busiest} slots were busy at once`);
    const workers = new Set(answers.map((a) => (a.data!.result as { worker: string }).worker));
    assert.equal(workers.size, 2, "both replicas served");
    assert.equal(runtime.capacity(TEST_PROJECT, "wide").replicas, 2);
  });

  it("cold-starts a replica, reuses it warm, and stops it after the cooldown", async () => {
    const runtime = t.server.context.runtime;
    assert.equal(runtime.capacity(TEST_PROJECT, "cool").replicas, 0, "no replica before the first call");
    const first = await callFunction(t, "cool", "pid");
    // The worker's pid on the host (it reports the one of its sandbox), and the replica's the server logs.
    const pid = hostPid(coolDir, pidOf(first.data));
    const replica = replicaPid(pid);
    assert.equal(t.logs.filter((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/cool`).length, 1);
    const second = await callFunction(t, "cool", "pid");
    assert.equal(hostPid(coolDir, pidOf(second.data)), pid, "the warm replica served the second call");
    assert.equal(t.logs.filter((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/cool`).length, 1);
    await waitFor(() => !alive(pid) && !alive(replica), "the idle replica to stop after its cooldown", 10_000);
    assert.equal(runtime.capacity(TEST_PROJECT, "cool").replicas, 0);
    assert.ok(t.logs.some((l) => l.msg === "replica stopping" && l.reason === "cooldown" && l.pid === replica));
    const third = await callFunction(t, "cool", "pid");
    assert.notEqual(hostPid(coolDir, pidOf(third.data)), pid, "a new replica cold-started");
  });

  it("keeps min_replicas warm past the cooldown", async () => {
    const runtime = t.server.context.runtime;
    assert.equal(runtime.capacity(TEST_PROJECT, "warm").replicas, 1, "started without a call");
    const pid = hostPid(warmDir, pidOf((await callFunction(t, "warm", "pid")).data));
    await sleep(1500);
    assert.ok(alive(pid), "the last replica outlives its cooldown");
    assert.equal(hostPid(warmDir, pidOf((await callFunction(t, "warm", "pid")).data)), pid);
  });
});

describe("the per-app queue", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_APP_QUEUE_LIMIT: "2" } });
    await deployApp(t, "narrow", { toml: "[scaling]\nmax_replicas = 1\n", files: { "main.py": MAIN } });
  });
  after(() => t.close());

  it("answers 429 with Retry-After once the queue is full, and serves the queued calls", async () => {
    const running = callFunction(t, "narrow", "sleepy", { seconds: 1 });
    await waitFor(() => t.server.context.runtime.capacity(TEST_PROJECT, "narrow").busy === 1, "the first call to run");
    const queued = [callFunction(t, "narrow", "pid"), callFunction(t, "narrow", "pid")];
    await waitFor(() => t.server.context.runtime.capacity(TEST_PROJECT, "narrow").queued === 2, "two calls to queue");
    const refused = await callFunction(t, "narrow", "pid");
    assert.equal(refused.response.status, 429);
    assert.match(refused.response.headers.get("retry-after") ?? "", /^\d+$/);
    assert.equal((await running).data?.result, "woke");
    for (const answer of await Promise.all(queued)) assert.equal(answer.response.status, 200);
  });
});
