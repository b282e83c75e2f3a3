import assert from "node:assert/strict";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { createServer as createHttpServer, type Server } from "node:http";
import { writeFile } from "node:fs/promises";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import {
  closeForwardConnections,
  forwardCall,
  type ForwardKey,
  forwardKey,
  type ForwardRequest,
  signForward,
} from "../../server/cluster/mod.ts";
import { parseMasterKey } from "../../server/keys/mod.ts";
import { isProblemError, type ProblemError } from "../../server/problems/mod.ts";
import { runtimeExecutor } from "../../server/placement/mod.ts";
import { type ExecutedItem, newRunId, toRunError } from "../../server/runs/mod.ts";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { engines, TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { getRun, rejection } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `
import asyncio, os, time

def add(a, b):
    return a + b

def touch(path):
    open(path, "w").close()
    return "touched"

def fail(word):
    raise ValueError(f"no {word}")

def gated(gate, done):
    yield "first"
    while not os.path.exists(gate):
        time.sleep(0.02)
    yield {"second": [2]}
    yield "line one\\nline two"
    open(done, "w").close()

def endless(marker):
    try:
        while True:
            yield "tick"
            time.sleep(0.05)
    except GeneratorExit:
        open(marker, "w").close()
        raise

async def hang(started, marker):
    open(started, "w").close()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        open(marker, "w").close()
        raise
`;

describe("forwarding a call to another host", () => {
  let t: TestServer;
  let dir: string;
  /** Derived here from the master key the server was given, as another process would. */
  let key: ForwardKey;

  before(async () => {
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    // One call may wait per app: the queue-full test fills it.
    t = await startTestServer({
      env: { RUNPLANE_MASTER_KEY: TEST_MASTER_KEY, RUNPLANE_SANDBOX: "off", RUNPLANE_APP_QUEUE_LIMIT: "1" },
    });
    dir = await deployApp(t, "fwd", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 4\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
    await deployApp(t, "tight", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
    key = forwardKey(parseMasterKey(TEST_MASTER_KEY));
  });
  after(async () => {
    await closeForwardConnections();
    await t.close();
  });

  function request(fn: string, input: Record<string, unknown>, signal = new AbortController().signal): ForwardRequest {
    return { projectId: TEST_PROJECT, app: "fwd", functionName: fn, input, runId: newRunId(), signal };
  }

  /** The app's busy slots on the server: 0 once every call there has ended. */
  function busy(): number {
    return t.server.context.runtime.capacity(TEST_PROJECT, "fwd").busy;
  }

  it("the server exposes its forwarding key, derived from the master key", () => {
    const own = t.server.context.forwardKey;
    assert.ok(own);
    const fields = { runId: "run_x", projectId: "p", appId: "a", functionName: "f", at: 1 };
    assert.equal(signForward(own, fields), signForward(key, fields));
  });

  it("round-trips a result", async () => {
    const outcome = await forwardCall(t.url, request("add", { a: 2, b: 3 }), { key });
    assert.equal(outcome.kind, "result");
    assert.equal(outcome.kind === "result" && outcome.result, 5);
    assert.ok(outcome.kind === "result" && outcome.runTimeMs >= 0);
  });

  it("sends the caller's JSON text as it is", async () => {
    const call = { ...request("add", {}), inputJson: '{"a": "x", "b": "y"}' };
    const outcome = await forwardCall(t.url, call, { key });
    assert.deepEqual(outcome, {
      kind: "result",
      result: "xy",
      runTimeMs: outcome.kind === "result" && outcome.runTimeMs,
    });
  });

  it("forwards a stream item by item: the first item arrives while the function still runs", async () => {
    const gate = join(dir, "gated.open");
    const done = join(dir, "gated.done");
    const outcome = await forwardCall(t.url, request("gated", { gate, done }), { key });
    assert.equal(outcome.kind, "stream");
    if (outcome.kind !== "stream") return;
    const items = outcome.items[Symbol.asyncIterator]();
    assert.deepEqual(await items.next(), { done: false, value: { value: "first" } });
    // The generator waits on the gate: the first item came before the rest was made.
    assert.equal(existsSync(done), false);
    await writeFile(gate, "");
    const rest: ExecutedItem[] = [];
    for (let next = await items.next(); !next.done; next = await items.next()) rest.push(next.value);
    assert.deepEqual(rest, [{ value: { second: [2] } }, { value: "line one\nline two" }]);
    assert.equal(existsSync(done), true);
  });

  it("keeps a function error's type, message and traceback", async () => {
    const error = await rejection(forwardCall(t.url, request("fail", { word: "luck" }), { key }));
    const forwarded = toRunError(error);
    assert.equal(forwarded.type, "ValueError");
    assert.equal(forwarded.message, "no luck");
    assert.match(forwarded.traceback ?? "", /ValueError: no luck/);
    // Exactly what the same call answers when it runs on the server's own executor.
    const local = toRunError(
      await rejection(runtimeExecutor(t.server.context.runtime).execute(request("fail", { word: "luck" }))),
    );
    assert.deepEqual(forwarded, local);
    assert.equal((error as ProblemError).status, 500);
  });

  it("answers a missing app with the remote's 404 problem", async () => {
    const error = await rejection(forwardCall(t.url, { ...request("add", {}), app: "nope" }, { key }));
    assert.ok(isProblemError(error));
    assert.equal(error.kind, "not-found");
    assert.equal(error.status, 404);
    assert.match(error.message, /no app named nope/);
  });

  it("answers a full queue with the remote's 429 problem and its Retry-After", async () => {
    const controller = new AbortController();
    const started = join(dir, "tight.started");
    const running = forwardCall(t.url, {
      ...request("hang", { started, marker: join(dir, "tight.cancelled") }, controller.signal),
      app: "tight",
    }, { key });
    running.catch(() => {});
    await waitFor(() => existsSync(started), "the app's one slot to be taken");
    const waiting = forwardCall(t.url, { ...request("add", { a: 1, b: 1 }, controller.signal), app: "tight" }, { key });
    waiting.catch(() => {});
    await waitFor(() => t.server.context.runtime.capacity(TEST_PROJECT, "tight").queued === 1, "a call to wait");
    try {
      const error = await rejection(forwardCall(t.url, { ...request("add", { a: 1, b: 2 }), app: "tight" }, { key }));
      assert.ok(isProblemError(error));
      assert.equal(error.kind, "too-many-requests");
      assert.equal(error.status, 429);
      assert.equal(error.options.headers?.["Retry-After"], "1");
    } finally {
      controller.abort();
    }
    assert.equal(toRunError(await rejection(running)).type, "interrupted");
  });

  it("answers a body that is not a JSON object with a 400 problem, running nothing", async () => {
    const error = await rejection(forwardCall(t.url, { ...request("add", {}), inputJson: "[1, 2]" }, { key }));
    assert.ok(isProblemError(error));
    assert.equal(error.status, 400);
  });

  it("stops the function on the remote when the caller's signal aborts mid-call", async () => {
    const started = join(dir, "hang-abort.started");
    const marker = join(dir, "hang-abort.cancelled");
    const controller = new AbortController();
    const call = forwardCall(t.url, request("hang", { started, marker }, controller.signal), { key });
    call.catch(() => {});
    await waitFor(() => existsSync(started), "the function to start");
    controller.abort();
    const error = await rejection(call);
    assert.equal(toRunError(error).type, "interrupted");
    await waitFor(() => existsSync(marker), "the function to see its cancellation");
    await waitFor(() => busy() === 0, "the replica's slot to free");
  });

  it("stops the generator on the remote when the reader stops early", async () => {
    const marker = join(dir, "endless.closed");
    const outcome = await forwardCall(t.url, request("endless", { marker }), { key });
    assert.equal(outcome.kind, "stream");
    if (outcome.kind !== "stream") return;
    let read = 0;
    for await (const item of outcome.items) {
      assert.equal(item.value, "tick");
      if (++read === 3) break;
    }
    await waitFor(() => existsSync(marker), "the generator to see GeneratorExit");
    await waitFor(() => busy() === 0, "the replica's slot to free");
  });

  it("stops the function past the deadline it was given, as a timeout", async () => {
    const started = join(dir, "hang-deadline.started");
    const marker = join(dir, "hang-deadline.cancelled");
    const error = await rejection(forwardCall(t.url, request("hang", { started, marker }), { key, deadlineMs: 500 }));
    assert.equal(toRunError(error).type, "timeout");
    assert.equal((error as ProblemError).status, 504);
    await waitFor(() => busy() === 0, "the replica's slot to free");
    // On a loaded machine the deadline may pass before the worker started the function: then it never does.
    if (existsSync(started)) await waitFor(() => existsSync(marker), "the function to see its cancellation");
    else {
      await sleep(300);
      assert.equal(existsSync(started), false, "the function started after its call timed out");
    }
  });

  it("refuses an absent or bad credential with 401, running nothing", async () => {
    const marker = join(dir, "touched-by-a-forger");
    const runId = newRunId();
    const url = `${t.url}/internal/v1/calls/${TEST_PROJECT}/fwd/touch`;
    const body = JSON.stringify({ path: marker });
    const at = Date.now();
    const forged = {
      absent: undefined,
      garbage: "v1,nonsense",
      "another run's": signForward(key, {
        runId: newRunId(),
        projectId: TEST_PROJECT,
        appId: "fwd",
        functionName: "touch",
        at,
      }),
      "another function's": signForward(key, { runId, projectId: TEST_PROJECT, appId: "fwd", functionName: "add", at }),
      stale: signForward(key, {
        runId,
        projectId: TEST_PROJECT,
        appId: "fwd",
        functionName: "touch",
        at: at - 600_000,
      }),
    };
    for (const [what, credential] of Object.entries(forged)) {
      const response = await checkedFetch(url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "X-Request-Id": runId,
          ...(credential === undefined ? {} : { "X-Runplane-Forwarded": credential }),
        },
        body,
      });
      assert.equal(response.status, 401, what);
      assert.equal(response.headers.get("content-type"), "application/problem+json", what);
      await response.body?.cancel();
    }
    await sleep(300);
    assert.equal(existsSync(marker), false, "a refused call ran");
    // The same call, signed, does run: the marker is a real witness.
    const outcome = await forwardCall(t.url, { ...request("touch", { path: marker }), runId }, { key });
    assert.equal(outcome.kind === "result" && outcome.result, "touched");
    assert.equal(existsSync(marker), true);
  });

  it("refuses a credential signed with another master key with 401", async () => {
    const other = forwardKey(parseMasterKey(Buffer.alloc(32, 7).toString("base64")));
    const marker = join(dir, "touched-by-another-cluster");
    const runId = newRunId();
    const response = await checkedFetch(`${t.url}/internal/v1/calls/${TEST_PROJECT}/fwd/touch`, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        "X-Request-Id": runId,
        "X-Runplane-Forwarded": signForward(other, {
          runId,
          projectId: TEST_PROJECT,
          appId: "fwd",
          functionName: "touch",
          at: Date.now(),
        }),
      },
      body: JSON.stringify({ path: marker }),
    });
    assert.equal(response.status, 401);
    await response.body?.cancel();
    // forwardCall says what is wrong, as a 503 the router may take elsewhere.
    const error = await rejection(forwardCall(t.url, request("touch", { path: marker }), { key: other }));
    assert.ok(isProblemError(error));
    assert.equal(error.kind, "service-unavailable");
    assert.equal(error.options.headers?.["Retry-After"], "1");
    assert.match(error.message, /RUNPLANE_MASTER_KEY/);
    await sleep(300);
    assert.equal(existsSync(marker), false, "a refused call ran");
  });

  it("answers a server without a master key with 404: the endpoint is not mounted", async () => {
    const plain = await startTestServer();
    try {
      assert.equal(plain.server.context.forwardKey, null);
      const response = await checkedFetch(`${plain.url}/internal/v1/calls/${TEST_PROJECT}/fwd/add`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: "{}",
      });
      assert.equal(response.status, 404);
      await response.body?.cancel();
    } finally {
      await plain.close();
    }
  });

  it("answers a host that cannot be reached with 503 service-unavailable and Retry-After", async () => {
    // A port just closed: nothing listens there.
    const listener = createServer().listen(0, "127.0.0.1");
    await once(listener, "listening");
    const url = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
    await new Promise((resolve) => listener.close(resolve));
    const error = await rejection(forwardCall(url, request("add", { a: 1, b: 2 }), { key }));
    assert.ok(isProblemError(error));
    assert.equal(error.kind, "service-unavailable");
    assert.match(error.message, /could not be reached/);
    assert.equal(error.options.headers?.["Retry-After"], "1");
  });
});

describe("forwarding to a host that goes away", () => {
  const key = forwardKey(parseMasterKey(TEST_MASTER_KEY));
  let host: Server;
  let url: string;
  /** What the host does with the next request: answers with these frames, then drops the connection. */
  let frames: string[] | "drop before answering" = [];

  before(async () => {
    host = createHttpServer((req, res) => {
      req.resume();
      req.on("end", () => {
        if (frames === "drop before answering") return void res.socket?.destroy();
        res.writeHead(200, { "Content-Type": "application/x-ndjson" });
        for (const frame of frames) res.write(`${frame}\n`);
        setTimeout(() => res.socket?.destroy(), 50);
      });
    }).listen(0, "127.0.0.1");
    await once(host, "listening");
    url = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
  });
  after(async () => {
    await closeForwardConnections();
    host.closeAllConnections();
    await new Promise((resolve) => host.close(resolve));
  });

  function request(): ForwardRequest {
    return {
      projectId: TEST_PROJECT,
      app: "fwd",
      functionName: "f",
      input: {},
      runId: newRunId(),
      signal: new AbortController().signal,
    };
  }

  it("is 503 service-unavailable when the connection drops before an answer: the call may go elsewhere", async () => {
    frames = "drop before answering";
    await assert.rejects(forwardCall(url, request(), { key }), (error) => {
      assert.ok(isProblemError(error));
      assert.equal(error.kind, "service-unavailable");
      assert.equal(error.options.headers?.["Retry-After"], "1");
      return true;
    });
  });

  it("is upstream_error when it drops after it took the call: the function may have run", async () => {
    frames = ['{"deployment":"dep_1"}'];
    const told: string[] = [];
    await assert.rejects(forwardCall(url, { ...request(), onDeployment: (id) => told.push(id) }, { key }), (error) => {
      assert.equal(toRunError(error).type, "upstream_error");
      return true;
    });
    assert.deepEqual(told, ["dep_1"]);
  });

  it("throws upstream_error from a stream cut off after its first items", async () => {
    frames = ['{"stream":true}', '{"item":1}', '{"item":"two","event":"tick"}'];
    const outcome = await forwardCall(url, request(), { key });
    assert.equal(outcome.kind, "stream");
    if (outcome.kind !== "stream") return;
    const items: ExecutedItem[] = [];
    await assert.rejects(
      (async () => {
        for await (const item of outcome.items) items.push(item);
      })(),
      (error) => {
        assert.equal(toRunError(error).type, "upstream_error");
        return true;
      },
    );
    assert.deepEqual(items, [{ value: 1 }, { value: "two", event: "tick" }]);
  });
});

const shared = (await engines()).includes("postgres");

describe("forwarding between two processes on one PostgreSQL", { skip: !shared && "no PostgreSQL" }, () => {
  let origin: TestServer;
  let remote: TestServer;

  before(async () => {
    origin = await startTestServer({ engine: "postgres" });
    remote = await startTestServer({ databaseUrl: origin.databaseUrl! });
    // Only the remote has the app: the call can run nowhere else.
    await deployApp(remote, "only-there", { toml: "[scaling]\nmax_replicas = 1\n", files: { "main.py": MAIN } });
  });
  after(async () => {
    await closeForwardConnections();
    await remote?.close();
    await origin?.close();
  });

  it("runs a call signed with one process's key on the other, which keeps no run record of it", async () => {
    const runId = newRunId();
    const outcome = await forwardCall(remote.url, {
      projectId: TEST_PROJECT,
      app: "only-there",
      functionName: "add",
      input: { a: 20, b: 22 },
      runId,
      signal: new AbortController().signal,
    }, { key: origin.server.context.forwardKey!, now: origin.server.context.store.clock.now });
    assert.equal(outcome.kind === "result" && outcome.result, 42);
    // The forwarding process keeps the record; the remote only executed.
    const { response } = await getRun({ client: origin.client, project: TEST_PROJECT, app: "only-there" }, runId);
    assert.equal(response.status, 404);
  });
});
