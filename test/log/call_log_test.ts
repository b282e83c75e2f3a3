import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { type AppRef, callRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Line = Record<string, unknown>;

const APP = "logged";
const MAIN_PY = `import time


def hello(name="world"):
    print(f"greeting {name}")
    return {"message": f"Hello, {name}!"}


def count(n=3):
    for i in range(n):
        yield {"i": i}


def slow_count(n=100):
    for i in range(n):
        yield {"i": i}
        time.sleep(0.1)


def boom():
    raise ValueError("no luck")


def nap(seconds=0.2):
    time.sleep(seconds)
    return "rested"
`;

async function deployLogged(t: TestServer): Promise<AppRef> {
  await deployApp(t, APP, {
    toml: `[deployment]\nname = "${APP}"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 4\n`,
    files: { "main.py": MAIN_PY },
  });
  return { client: t.client, project: TEST_PROJECT, app: APP };
}

/** Every line about run `runId` except the function's own output. */
function linesOf(t: TestServer, runId: string): Line[] {
  return t.logs.filter((l) => (l.req_id === runId || l.run_id === runId) && l.msg !== "function output");
}

/** Waits until `count` lines about `runId` are logged, then a little longer so a late extra line shows. */
async function settledLines(t: TestServer, runId: string, count: number): Promise<Line[]> {
  await waitFor(() => linesOf(t, runId).length >= count, `${count} log lines of ${runId}`);
  await sleep(300);
  return linesOf(t, runId);
}

/** Asserts the one line of a sync or stream call. */
function assertCallLine(line: Line, expected: Line): void {
  assert.equal(line.msg, "request");
  assert.equal(line.level, 30, "an info line");
  assert.equal(line.operationId, "runFunction");
  assert.equal(line.app, `${TEST_PROJECT}/${APP}`);
  assert.equal(typeof line.duration_ms, "number", "the request's duration");
  assert.equal(line.queue_time_ms, 0, "a sync or stream call does not queue");
  for (const [name, value] of Object.entries(expected)) assert.deepEqual(line[name], value, name);
}

async function streamCall(t: TestServer, fn: string, signal?: AbortSignal): Promise<Response> {
  return await fetch(`${t.url}/v4/${TEST_PROJECT}/${APP}/${fn}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
    body: "{}",
    signal,
  });
}

describe("call logs at level info", () => {
  let t: TestServer;
  let ref: AppRef;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_LOG_LEVEL: "info" } });
    ref = await deployLogged(t);
  });
  after(() => t.close());

  it("log a sync call as one line with its run, status and times, and keep the function's output", async () => {
    const { data, response } = await callRun(ref, "hello", { body: { name: "logs" } });
    assert.equal(response.status, 200);
    const runId = (data as { run_id: string }).run_id;
    assert.equal(response.headers.get("x-request-id"), runId);
    const lines = await settledLines(t, runId, 1);
    assert.equal(lines.length, 1, `one line, got ${JSON.stringify(lines)}`);
    assertCallLine(lines[0], {
      req_id: runId,
      run_id: runId,
      function: "hello",
      mode: "sync",
      status: 200,
      run_status: "success",
      error_type: null,
    });
    assert.equal(typeof lines[0].run_time_ms, "number", "the run's duration");
    const output = t.logs.filter((l) => l.msg === "function output" && l.run_id === runId);
    assert.ok(output.some((l) => String(l.text).includes("greeting logs")), "the function's output is logged");
  });

  it("log a stream call as one line once the stream has ended", async () => {
    const response = await streamCall(t, "count");
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /text\/event-stream/);
    const runId = response.headers.get("x-request-id")!;
    const text = await response.text();
    assert.match(text, /"i":2/);
    const lines = await settledLines(t, runId, 1);
    assert.equal(lines.length, 1, `one line, got ${JSON.stringify(lines)}`);
    assertCallLine(lines[0], {
      req_id: runId,
      run_id: runId,
      function: "count",
      mode: "stream",
      status: 200,
      run_status: "success",
    });
    assert.equal(lines[0].client_gone, undefined);
  });

  it("log a stream whose client went away as one line with the run's end", async () => {
    const controller = new AbortController();
    const response = await streamCall(t, "slow_count", controller.signal);
    const runId = response.headers.get("x-request-id")!;
    const reader = response.body!.getReader();
    await reader.read();
    controller.abort();
    const lines = await settledLines(t, runId, 1);
    assert.equal(lines.length, 1, `one line, got ${JSON.stringify(lines)}`);
    assertCallLine(lines[0], { run_id: runId, function: "slow_count", mode: "stream", client_gone: true });
    assert.notEqual(lines[0].run_status, "running", "the line waited for the run's end");
    assert.notEqual(lines[0].run_status, "success");
  });

  it("log a failed sync call as one line with the run's error type", async () => {
    const { response } = await callRun(ref, "boom");
    assert.ok(response.status >= 400);
    const runId = response.headers.get("x-request-id")!;
    const lines = (await settledLines(t, runId, 1)).filter((l) => l.msg === "request");
    assert.equal(lines.length, 1, `one request line, got ${JSON.stringify(lines)}`);
    assertCallLine(lines[0], { run_id: runId, function: "boom", mode: "sync", status: response.status });
    assert.equal(lines[0].run_status, "failure");
    assert.equal(typeof lines[0].error_type, "string");
    assert.ok(!linesOf(t, runId).some((l) => l.msg === "run finished" || l.msg === "run started"));
  });

  it("log an async run when it is accepted and when it ends", async () => {
    const runId = await submitAsync(ref, "nap", { body: { seconds: 0.2 } });
    await waitForStatus(ref, runId, ["success"]);
    const lines = await settledLines(t, runId, 2);
    assert.equal(lines.length, 2, `two lines, got ${JSON.stringify(lines)}`);
    const [accepted, ended] = lines;
    assert.equal(accepted.msg, "request");
    assert.equal(accepted.status, 202);
    assert.equal(accepted.req_id, runId);
    assert.equal(accepted.mode, "async");
    assert.equal(accepted.function, "nap");
    assert.equal(accepted.app, `${TEST_PROJECT}/${APP}`);
    assert.equal(ended.msg, "run finished");
    assert.equal(ended.level, 30);
    assert.equal(ended.run_id, runId);
    assert.equal(ended.status, "success");
    assert.equal(ended.function, "nap");
    assert.equal(ended.mode, "async");
    assert.equal(typeof ended.duration_ms, "number");
    assert.equal(typeof ended.queue_time_ms, "number");
  });

  it("log each REST request as one line, as before", async () => {
    const before = t.logs.length;
    const response = await fetch(`${t.url}/healthz`);
    assert.equal(response.status, 200);
    await waitFor(() => t.logs.slice(before).some((l) => l.msg === "request"), "the request line");
    await sleep(100);
    const lines = t.logs.slice(before).filter((l) => l.path === "/healthz");
    assert.equal(lines.length, 1);
    assert.equal(lines[0].operationId, "getHealth");
    assert.equal(lines[0].run_id, undefined);
  });
});

describe("call logs at level debug", () => {
  let t: TestServer;
  let ref: AppRef;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_LOG_LEVEL: "debug" } });
    ref = await deployLogged(t);
  });
  after(() => t.close());

  it("show the run's start and end as debug lines beside the call's one info line", async () => {
    const { data, response } = await callRun(ref, "hello");
    assert.equal(response.status, 200);
    const runId = (data as { run_id: string }).run_id;
    const lines = await settledLines(t, runId, 3);
    const started = lines.filter((l) => l.msg === "run started");
    assert.equal(started.length, 1);
    assert.equal(started[0].level, 20);
    assert.equal(started[0].function, "hello");
    const finished = lines.filter((l) => l.msg === "run finished");
    assert.equal(finished.length, 1);
    assert.equal(finished[0].level, 20);
    const requests = lines.filter((l) => l.msg === "request");
    assert.equal(requests.length, 1);
    assert.equal(requests[0].level, 30);
    assert.equal(requests[0].run_status, "success");
  });
});
