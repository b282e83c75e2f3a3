/**
 * The wire between a host's workers and its supervisor (server/host/_call_wire.ts), end to end in one
 * process: a test server's runtime runs real Python replicas behind `listenForWorkerCalls`, and
 * `SupervisorCalls` hands it calls over the Unix socket as a worker does.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { createConnection, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { SupervisorCalls } from "../../server/host/call_client.ts";
import { listenForWorkerCalls, type WorkerCallsServer } from "../../server/host/call_server.ts";
import { createLogger } from "../../server/log.ts";
import { isProblemError } from "../../server/problems/mod.ts";
import { runtimeExecutor } from "../../server/placement/mod.ts";
import { type ExecutedCall, type ExecuteRequest, newRunId, toRunError } from "../../server/runs/mod.ts";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { rejection } from "../_helpers/runs.ts";
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

def big(count, progress):
    for i in range(count):
        with open(progress, "w") as f:
            f.write(str(i + 1))
        yield {"i": i, "pad": "x" * 65536}

async def hang(started, marker):
    open(started, "w").close()
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        open(marker, "w").close()
        raise
`;

describe("the wire between a host's workers and its supervisor", () => {
  let t: TestServer;
  let dir: string;
  let socketPath: string;
  let token: Buffer;
  let wire: WorkerCallsServer;
  let calls: SupervisorCalls;

  before(async () => {
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    t = await startTestServer({ env: { RUNPLANE_SANDBOX: "off" } });
    dir = await deployApp(t, "wire", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 64\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
    socketPath = join(await mkdtemp(join(tmpdir(), "runplane-wire-")), "supervisor.sock");
    token = randomBytes(32);
    wire = await listenForWorkerCalls(socketPath, {
      token,
      executor: runtimeExecutor(t.server.context.runtime),
      bodyLimitBytes: 1024 * 1024,
      logger: createLogger({ level: "silent" }),
    });
    calls = new SupervisorCalls(socketPath, { token: token.toString("hex") });
  });
  after(async () => {
    calls?.close();
    await wire?.close();
    await t?.close();
    await rm(join(socketPath, ".."), { recursive: true, force: true });
  });

  function request(fn: string, input: Record<string, unknown>, signal = new AbortController().signal): ExecuteRequest {
    return { projectId: TEST_PROJECT, app: "wire", functionName: fn, input, runId: newRunId(), signal };
  }

  function busy(): number {
    return t.server.context.runtime.capacity(TEST_PROJECT, "wire").busy;
  }

  it("answers each of 150 calls at once with its own result, over one connection", async () => {
    // A warm replica first: its 64 slots and the app's queue of 100 take the 150.
    await calls.execute(request("add", { a: 0, b: 0 }));
    const outcomes = await Promise.all(
      Array.from({ length: 150 }, (_, i) => calls.execute(request("add", { a: i, b: 1000 }))),
    );
    assert.deepEqual(
      outcomes.map((o) => o.kind === "result" && o.result),
      Array.from({ length: 150 }, (_, i) => i + 1000),
    );
  });

  it("sends the caller's JSON text as it is, newlines and all", async () => {
    const call = { ...request("add", {}), inputJson: '{\n"a": "x\\ny",\n"b": "z"\n}' };
    const outcome = await calls.execute(call);
    assert.equal(outcome.kind === "result" && outcome.result, "x\nyz");
  });

  it("keeps a function error's type, message and traceback, and the connection serves on", async () => {
    const error = await rejection(calls.execute(request("fail", { word: "luck" })));
    const failed = toRunError(error);
    assert.equal(failed.type, "ValueError");
    assert.equal(failed.message, "no luck");
    assert.match(failed.traceback ?? "", /ValueError: no luck/);
    const outcome = await calls.execute(request("add", { a: 1, b: 2 }));
    assert.equal(outcome.kind === "result" && outcome.result, 3);
  });

  it("stops the function when the call is given up, while the others on the connection go on", async () => {
    const started = join(dir, "hang.started");
    const marker = join(dir, "hang.cancelled");
    const controller = new AbortController();
    const hanging = calls.execute(request("hang", { started, marker }, controller.signal));
    hanging.catch(() => {});
    await waitFor(() => existsSync(started), "the function to start");
    const beside = calls.execute(request("add", { a: 2, b: 2 }));
    controller.abort();
    assert.equal(toRunError(await rejection(hanging)).type, "interrupted");
    const outcome = await beside;
    assert.equal(outcome.kind === "result" && outcome.result, 4);
    await waitFor(() => existsSync(marker), "the function to see its cancellation");
    await waitFor(() => busy() === 0, "the replica's slot to free");
  });

  it("holds a stream whose reader stopped reading: the function waits, then every item arrives in order", async () => {
    const progress = join(dir, "big.progress");
    const outcome = await calls.execute(request("big", { count: 300, progress }));
    assert.equal(outcome.kind, "stream");
    if (outcome.kind !== "stream") return;
    const items = outcome.items[Symbol.asyncIterator]();
    assert.equal(((await items.next()).value as { value: { i: number } }).value.i, 0);
    // 300 items of 64 KiB are ~19 MiB; the reader holds at ~1 MiB, the pipes and sockets between a few more.
    let made = 0;
    for (let i = 0; i < 10; i++) {
      await sleep(200);
      made = Number(await readFile(progress, "utf8"));
    }
    assert.ok(made < 150, `the function made ${made} of 300 items for a reader that read one`);
    let next = 1;
    for (let item = await items.next(); !item.done; item = await items.next()) {
      assert.equal((item.value.value as { i: number }).i, next++);
    }
    assert.equal(next, 300);
  });

  it("refuses a connection that does not say the token, running nothing", async () => {
    const marker = join(dir, "touched-by-a-stranger");
    const stranger = new SupervisorCalls(socketPath, { token: randomBytes(32).toString("hex") });
    try {
      const error = await rejection(stranger.execute(request("touch", { path: marker })));
      assert.ok(isProblemError(error));
      assert.equal(error.kind, "service-unavailable");
      assert.equal(error.options.headers?.["Retry-After"], "1");
    } finally {
      stranger.close();
    }
    // Nor does a raw writer that skips the hello.
    const socket = createConnection(socketPath);
    socket.write(`0 ${JSON.stringify({ p: TEST_PROJECT, a: "wire", f: "touch", r: newRunId(), n: 2 })}\n{}`);
    await new Promise((resolve) => socket.once("close", resolve));
    await sleep(300);
    assert.equal(existsSync(marker), false);
  });

  it("makes its socket its user's alone", async () => {
    assert.equal((await stat(socketPath)).mode & 0o777, 0o600);
  });

  it("is interrupted when the connection breaks after the supervisor took the call, 503 when none listens", async () => {
    const started = join(dir, "hang-gone.started");
    const marker = join(dir, "hang-gone.cancelled");
    const running = calls.execute(request("hang", { started, marker }));
    running.catch(() => {});
    await waitFor(() => existsSync(started), "the function to start");
    calls.close();
    // The function may have run: not a call to send elsewhere, but one cut as a stopping server cuts it.
    assert.equal(toRunError(await rejection(running)).type, "interrupted");
    await waitFor(() => existsSync(marker), "the function to be stopped with its connection");
    await wire.close();
    const later = new SupervisorCalls(socketPath, { token: token.toString("hex") });
    try {
      const error = await rejection(later.execute(request("add", { a: 1, b: 1 })));
      assert.ok(isProblemError(error));
      assert.equal(error.kind, "service-unavailable");
      assert.equal(error.options.headers?.["Retry-After"], "1");
    } finally {
      later.close();
    }
  });
});

describe("a worker's calls when its supervisor goes away", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-wire-gone-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  let sockets = 0;

  /**
   * Calls, as a worker does, a supervisor that reads the worker's hello, answers it (or not) and dies as
   * soon as a call's header arrives, after writing `frames` of it (none: what a worker sees when its
   * supervisor is killed while the call waits for a slot or runs a function that says nothing until it
   * returns). What the call rejected with, or the items of its stream and why it ended.
   */
  async function callDyingSupervisor(options: { accepts: boolean; frames?: string[] }): Promise<unknown> {
    const path = join(dir, `supervisor-${sockets++}.sock`);
    const server = createServer((socket) => {
      let seen = "";
      socket.on("data", (chunk: Buffer) => {
        const first = !seen.includes("\n");
        seen += chunk.toString("utf8");
        const lines = seen.split("\n");
        if (first && lines.length > 1) {
          if (!options.accepts) return void socket.destroy();
          socket.write("ok\n");
        }
        if (lines.length < 3) return;
        for (const frame of options.frames ?? []) socket.write(`${lines[1].split(" ")[0]} ${frame}\n`);
        // Its process gone: what it wrote still arrives, then the connection closes.
        socket.end();
      });
    });
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const calls = new SupervisorCalls(path, { token: "00" });
    const signal = new AbortController().signal;
    try {
      const request = { projectId: TEST_PROJECT, app: "wire", functionName: "f", input: {}, runId: newRunId(), signal };
      let outcome: ExecutedCall;
      try {
        outcome = await calls.execute(request);
      } catch (error) {
        return error;
      }
      if (outcome.kind !== "stream") return outcome;
      const items: unknown[] = [];
      try {
        for await (const item of outcome.items) items.push(item.value);
      } catch (error) {
        return { items, error };
      }
      return { items, error: null };
    } finally {
      calls.close();
      server.close();
    }
  }

  it("ends a call it took interrupted (409), though no frame of it came: its function may have run", async () => {
    const error = await callDyingSupervisor({ accepts: true });
    assert.equal(toRunError(error).type, "interrupted");
    assert.ok(isProblemError(error));
    assert.equal(error.status, 409);
    assert.match(error.message, /supervisor stopped during the call/);
  });

  it("ends a stream it took interrupted when it goes away after the first items", async () => {
    const cut = await callDyingSupervisor({ accepts: true, frames: ['{"stream":true}', '{"item":1}'] });
    const { items, error } = cut as { items: unknown[]; error: unknown };
    assert.deepEqual(items, [1]);
    assert.equal(toRunError(error).type, "interrupted");
  });

  it("answers a call on a connection it never accepted 503 with Retry-After: nothing ran, it may be sent again", async () => {
    const error = await callDyingSupervisor({ accepts: false });
    assert.ok(isProblemError(error));
    assert.equal(error.kind, "service-unavailable");
    assert.equal(error.options.headers?.["Retry-After"], "1");
  });
});
