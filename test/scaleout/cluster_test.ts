/**
 * Three processes on one PostgreSQL as one cluster (issue 31, `RUNPLANE_ADVERTISE_URL`): an app's
 * `max_replicas` and `min_replicas` count across all three, a call goes to warm capacity wherever it is
 * (forwarded over HTTP, a stream item by item), a cancel crosses the hop, an async backlog runs only
 * where replicas are, and the seats of a killed process go to another after the lease.
 */
import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SERVER_PID_PY } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { type AppRef, callRun, cancelRun, listRuns, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
} from "../_helpers/server_process.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");

/** Each function says which replica (worker pid, server pid) ran it. */
function mainPy(marks: string): string {
  return `import os, time

MARKS = ${JSON.stringify(marks)}

${SERVER_PID_PY}

def who(run_id, **kw):
    return {"worker": os.getpid(), "server": _server_pid()}

def slow(run_id, seconds=0.3):
    time.sleep(seconds)
    return {"worker": os.getpid(), "server": _server_pid()}

def count(n=5, gate=""):
    for i in range(n):
        yield {"i": i, "server": _server_pid()}
        if i == 0 and gate:
            while not os.path.exists(gate):
                time.sleep(0.02)

def wait_gate(gate):
    while not os.path.exists(gate):
        time.sleep(0.02)
    return {"worker": os.getpid(), "server": _server_pid()}

def hang(tag):
    while True:
        with open(os.path.join(MARKS, tag + ".beat"), "a") as f:
            f.write(".")
        time.sleep(0.05)
`;
}

// A quarter core a replica: the third host (RUNPLANE_HOST_CPU=1) has room for these, not for "big".
const ONE = `[deployment]\nname = "one"\n\n[scaling]\nmin_replicas = 0\nmax_replicas = 1\n`
  + `replica_concurrency = 2\ncooldown = 300\nresponse_grace_period = 120\n\n[hardware]\ncpu = 0.25\n`;
const WARM = `[deployment]\nname = "warm"\n\n[scaling]\nmin_replicas = 1\nmax_replicas = 1\n`
  + `replica_concurrency = 4\ncooldown = 300\n\n[hardware]\ncpu = 0.25\n`;

// Two cores a replica: more than the third host's RUNPLANE_HOST_CPU of 1, so it never runs one there.
const BIG = `[deployment]\nname = "big"\n\n[scaling]\nmax_replicas = 1\ncooldown = 300\n\n[hardware]\ncpu = 2\n`;

type Who = { worker: number; server: number };

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe("three processes as one cluster: replicas counted, placed and reached cluster-wide", {
  skip: !POSTGRES,
}, () => {
  let database: TestDatabase;
  let marks: string;
  const dirs: ServerDirs[] = [];
  const hosts: ServerProcess[] = [];
  const on = (server: ServerProcess, app: string): AppRef => ({ client: server.client, project: PROCESS_PROJECT, app });
  const beats = (runId: string) =>
    existsSync(join(marks, `${runId}.beat`)) ? statSync(join(marks, `${runId}.beat`)).size : 0;

  async function startHost(i: number, token?: string): Promise<ServerProcess> {
    const env: Record<string, string> = i === 2 ? { RUNPLANE_HOST_CPU: "1" } : {};
    return await startClusterHost(dirs[i], { databaseUrl: database.url, token, env });
  }

  /** Replicas of `app` alive on each host (starting, idle or busy), as each host's getApp says. */
  async function replicasPerHost(app: string): Promise<number[]> {
    return await Promise.all(hosts.map(async (host) => {
      const response = await checkedFetch(`${host.url}/v3/projects/${PROCESS_PROJECT}/apps/${app}`, {
        headers: { Authorization: `Bearer ${host.token}` },
      });
      assert.equal(response.status, 200);
      const { replicas } = (await response.json()) as { replicas: { starting: number; idle: number; busy: number } };
      return replicas.starting + replicas.idle + replicas.busy;
    }));
  }

  before(async () => {
    database = await createTestDatabase();
    for (const name of ["a", "b", "c"]) dirs.push(await makeServerDirs(`runplane-cluster-${name}-`));
    marks = join(dirs[0].root, "marks");
    await mkdir(marks, { recursive: true });
    for (const d of dirs) {
      await d.deploy("one", { "runplane.toml": ONE, "main.py": mainPy(marks) });
      await d.deploy("warm", { "runplane.toml": WARM, "main.py": mainPy(marks) });
      await d.deploy("big", { "runplane.toml": BIG, "main.py": mainPy(marks) });
    }
    hosts.push(await startHost(0));
    for (const i of [1, 2]) hosts.push(await startHost(i, hosts[0].token));
  });
  after(async () => {
    await Promise.all(hosts.map((host) => host.kill()));
    await database?.drop();
    for (const d of dirs) await d.remove();
  });

  it("serves calls landing on all three hosts with one replica when max_replicas = 1", async () => {
    const answers = await Promise.all(Array.from({ length: 12 }, async (_, i) => {
      const { data, error, response } = await callRun(on(hosts[i % 3], "one"), "slow", { body: { seconds: 0.2 } });
      assert.equal(response.status, 200, `call ${i} on host ${i % 3}: ${JSON.stringify(error ?? data)}`);
      return (data as { result: Who }).result;
    }));
    const workers = new Set(answers.map((a) => `${a.server}/${a.worker}`));
    assert.ok(answers.every((a) => a.server > 0 && a.worker > 0), JSON.stringify(answers));
    assert.equal(workers.size, 1, `one replica served every call: ${[...workers].join(", ")}`);
    const perHost = await replicasPerHost("one");
    assert.equal(perHost.reduce((a, b) => a + b, 0), 1, `replicas per host: ${perHost.join(", ")}`);
  });

  it("keeps exactly one warm replica in the cluster for min_replicas = 1", async () => {
    await eventually(
      async () => ((await replicasPerHost("warm")).reduce((a, b) => a + b, 0) === 1 ? true : undefined),
      60_000,
      "one warm replica",
    );
    // Stays one: every host's upkeep has run several times by now.
    await sleep(2000);
    const perHost = await replicasPerHost("warm");
    assert.equal(perHost.reduce((a, b) => a + b, 0), 1, `replicas per host: ${perHost.join(", ")}`);
  });

  it("places a replica on a host with room when the call lands on one without", async () => {
    const small = hosts[2];
    const answers = await Promise.all(Array.from({ length: 3 }, async () => {
      const { data, response } = await callRun(on(small, "big"), "who");
      assert.equal(response.status, 200, JSON.stringify(data));
      return (data as { result: Who }).result;
    }));
    for (const answer of answers) {
      assert.notEqual(answer.server, small.child.pid, "not run on the host whose budget is too small");
    }
    assert.equal(new Set(answers.map((a) => `${a.server}/${a.worker}`)).size, 1);
    const perHost = await replicasPerHost("big");
    assert.deepEqual(perHost[2], 0);
    assert.equal(perHost.reduce((a, b) => a + b, 0), 1, `replicas per host: ${perHost.join(", ")}`);
  });

  it("forwards a stream intact, item by item, from the host holding the replica", async () => {
    const { data } = await callRun(on(hosts[0], "one"), "who");
    const holder = hosts.findIndex((h) => h.child.pid === (data as { result: Who }).result.server);
    assert.ok(holder >= 0);
    const caller = hosts[(holder + 1) % 3];
    const gate = join(marks, `gate-${Date.now()}`);
    const response = await checkedFetch(`${caller.url}/v4/${PROCESS_PROJECT}/one/count`, {
      method: "POST",
      headers: { Authorization: `Bearer ${caller.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ n: 4, gate }),
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("\n\n")) text += (await reader.read()).value ?? "";
    // The first item arrived through the hop while the generator still waits on the gate.
    assert.match(text, /"i":0/);
    assert.doesNotMatch(text, /"i":1/);
    await writeFile(gate, "");
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += chunk.value;
    const items = text.replaceAll(": ping\n\n", "").trim().split("\n\n").map((e) =>
      JSON.parse(e.slice("data: ".length))
    );
    assert.deepEqual(items.map((item) => item.i), [0, 1, 2, 3]);
    for (const item of items) assert.equal(item.server, hosts[holder].child.pid, "run by the holder's replica");
  });

  it("cancels a forwarded run: its function stops on the host that runs it", async () => {
    const { data } = await callRun(on(hosts[0], "one"), "who");
    const holder = hosts.findIndex((h) => h.child.pid === (data as { result: Who }).result.server);
    const caller = hosts[(holder + 2) % 3];
    const tag = `hang-${Date.now()}`;
    // A sync call on a host without the replica: forwarded, and cancelled on the host that took it.
    const call = callRun(on(caller, "one"), "hang", { body: { tag } });
    await eventually(async () => (beats(tag) > 5 ? true : undefined), 30_000, "the run beats");
    const running = await listRuns(on(caller, "one"), { status: "running" });
    const run = running.data?.runs.find((r) => r.function_name === "hang");
    assert.ok(run, "the run is listed running");
    const cancelled = await cancelRun(on(caller, "one"), run.run_id);
    assert.ok([200, 202].includes(cancelled.response.status), String(cancelled.response.status));
    await call;
    await waitForStatus(on(caller, "one"), run.run_id, ["cancelled"], 30_000);
    // A function that ignores its cancellation is stopped with its process within about a second.
    await sleep(1000);
    const stopped = beats(tag);
    await sleep(1000);
    assert.equal(beats(tag), stopped, "the function stopped beating on the holder");
  });

  it("drains an async backlog submitted to all three hosts on the one replica allowed", async () => {
    const ids = await Promise.all(Array.from({ length: 15 }, (_, i) => submitAsync(on(hosts[i % 3], "one"), "who")));
    const ran = new Set<string>();
    for (const runId of ids) {
      const run = await waitForStatus(on(hosts[0], "one"), runId, ["success", "failure", "cancelled"], 120_000);
      assert.equal(run.status, "success", `${runId}: ${JSON.stringify(run.error)}`);
      const who = run.result as Who;
      ran.add(`${who.server}/${who.worker}`);
    }
    assert.equal(ran.size, 1, `one replica ran every run: ${[...ran].join(", ")}`);
  });

  it("gives a draining host's seat to another at once, while its call in flight finishes there", async () => {
    const { data } = await callRun(on(hosts[0], "one"), "who");
    const holder = hosts.findIndex((h) => h.child.pid === (data as { result: Who }).result.server);
    const draining = hosts[holder];
    const gate = join(marks, `drain-gate-${Date.now()}`);
    const inFlight = callRun(on(draining, "one"), "wait_gate", { body: { gate } });
    await sleep(500);
    draining.child.kill("SIGTERM");
    // The signal is handled on the holder's event loop: a call that reached it first was taken before the
    // drain (a loaded machine showed it). What follows is about the calls after the drain began.
    await eventually(
      async () => draining.logs.some((line) => String(line.msg).startsWith("draining:")) || undefined,
      30_000,
      "the holder to begin draining",
    );
    const other = hosts[(holder + 1) % hosts.length];
    // Served elsewhere while the holder still drains (its call waits on the gate).
    const answer = await eventually(
      async () => {
        const { data, response } = await callRun(on(other, "one"), "who");
        return response.status === 200 ? (data as { result: Who }).result : undefined;
      },
      60_000,
      "a call served on another host during the drain",
    );
    assert.notEqual(answer.server, draining.child.pid);
    assert.equal(draining.child.exitCode, null, "the holder is still draining");
    await writeFile(gate, "");
    const finished = await inFlight;
    assert.equal(finished.response.status, 200, "the call in flight finished on the draining host");
    assert.equal((finished.data as { result: Who }).result.server, draining.child.pid);
    await draining.exited;
    hosts.splice(holder, 1);
  });

  it("after kill -9 of the host holding the replica, the next call cold-starts on another after the lease", async () => {
    const { data } = await callRun(on(hosts[0], "one"), "who");
    const holder = hosts.findIndex((h) => h.child.pid === (data as { result: Who }).result.server);
    await hosts[holder].kill();
    const survivor = hosts[(holder + 1) % hosts.length];
    const answer = await eventually(
      async () => {
        const { data, response } = await callRun(on(survivor, "one"), "who");
        return response.status === 200 ? (data as { result: Who }).result : undefined;
      },
      60_000,
      "a call served after the holder died",
    );
    assert.notEqual(answer.server, hosts[holder].child.pid);
    hosts.splice(holder, 1);
    const perHost = await replicasPerHost("one");
    assert.equal(perHost.reduce((a, b) => a + b, 0), 1, `replicas per host: ${perHost.join(", ")}`);
  });
});
