/**
 * The replica contract (issue 45): every kind of replica answers one `call()` (`CallableReplica`), and one
 * suite runs against each kind, as Hono runs one suite against every adapter. The kinds run real
 * processes: a Python worker (its own pipes), a Python worker called on a channel of a replica another
 * process owns (a host's worker, through `WorkerChannels` as a worker drives it), an app's own HTTP server
 * (a custom runtime's process behind its relay), an external url (an HTTP server on loopback). A replica
 * that could not be given a process has its own few cases: it never runs a call.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import type { SupervisorCalls } from "../../server/host/call_client.ts";
import { WorkerChannels } from "../../server/host/channel_calls.ts";
import { createLogger } from "../../server/log.ts";
import { ProblemError } from "../../server/problems/mod.ts";
import { CustomProcessReplica } from "../../server/runtime/_custom_replica.ts";
import { FailedReplica } from "../../server/runtime/_failed_replica.ts";
import { RunFailure } from "../../server/runtime/_failures.ts";
import type { CallOutcome } from "../../server/runtime/_outcome.ts";
import { PythonReplica } from "../../server/runtime/_python_replica.ts";
import type { CallableReplica, ReplicaCall } from "../../server/runtime/_replica.ts";
import { UrlUpstream } from "../../server/runtime/_url_upstream.ts";
import { startColdWorker } from "../../server/runtime/_worker_process.ts";
import { freePort } from "../../server/runtime/free_port.ts";
import { unjailedSandbox } from "../../server/sandbox/mod.ts";

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

/** The contract's functions, for the Python runtime. */
const MAIN_PY = `
import time

def echo(**kwargs):
    return kwargs

def fail():
    raise ValueError("no good")

def letters():
    for letter in "abc":
        yield letter

def nap(seconds):
    time.sleep(seconds)
    return "woke"
`;

/** The same functions as an HTTP server (a custom runtime's process, and the external url's server). */
const SERVER_PY = `
import json, os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path == "/echo":
            return self.answer(200, "application/json", json.dumps(body).encode())
        if self.path == "/fail":
            return self.answer(500, "text/plain", b"ValueError: no good")
        if self.path == "/nap":
            time.sleep(body["seconds"])
            return self.answer(200, "application/json", b'"woke"')
        if self.path == "/letters":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for letter in "abc":
                self.wfile.write(f"data: {letter}\\n\\n".encode())
                self.wfile.flush()
            return
        self.answer(404, "text/plain", b"no such function")

    def answer(self, status, kind, data):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

/** How long an interrupted call may take to end (loose: the machine may be loaded). */
const INTERRUPT_BOUND_MS = 15_000;

/** One kind of replica under the contract. */
interface ReplicaKind {
  name: string;
  /** Starts a replica of the contract's functions; `close` frees whatever else it needed. */
  start(dir: string): Promise<{ replica: CallableReplica; close(): Promise<void> }>;
  /** How this kind reports a function that raised `ValueError("no good")`. */
  raised: { errorType: string; message: RegExp };
}

function pythonWorker(dir: string, channels = 0) {
  return startColdWorker({
    appDir: dir,
    label: "p-x/contract",
    python: "python3",
    concurrency: 4,
    preload: [],
    logger: silent,
    sandbox: unjailedSandbox(),
    jail: { projectId: "p-x", cwd: dir, egress: false, env: {} },
    channels,
  });
}

const PYTHON_RAISED = { errorType: "ValueError", message: /^ValueError: no good$/ };
const HTTP_RAISED = { errorType: "upstream_error", message: /^The app's server answered 500: ValueError: no good$/ };

/** Waits until a TCP port on loopback accepts a connection. */
async function listening(port: number): Promise<void> {
  for (let tries = 0; tries < 200; tries++) {
    const accepted = await new Promise<boolean>((resolve) => {
      const socket = connect(port, "127.0.0.1");
      socket.once("connect", () => resolve(true)).once("error", () => resolve(false));
      socket.once("close", () => socket.destroy());
      setTimeout(() => socket.destroy(), 1000).unref();
    }).catch(() => false);
    if (accepted) return;
    await sleep(100);
  }
  throw new Error(`nothing listened on port ${port}`);
}

/**
 * A Python replica another process owns, called on one of its channels as a host's worker calls it: the
 * owner (a `PythonReplica` with one channel, as the supervisor runs it) hands the channel to a
 * `WorkerChannels`, and each call goes through `WorkerChannels.execute` with a slot granted at once (the
 * supervisor's part, stubbed). A call that the worker would hand over instead is refused here.
 */
async function channelReplica(dir: string): Promise<{ replica: CallableReplica; close(): Promise<void> }> {
  let handed!: (sockets: readonly Socket[]) => void;
  const sockets = new Promise<readonly Socket[]>((resolve) => (handed = resolve));
  const owner = new PythonReplica({
    label: "p-x/contract",
    logger: silent,
    start: async () => pythonWorker(dir, 1),
    onChannels: (_replica, channels) => handed(channels),
  });
  const id = 1;
  // The supervisor's side: it kills the replica a worker asks it to kill, and tells how it ended.
  const channels = new WorkerChannels({ logger: silent, send: (message) => message.replica === id && owner.kill() });
  void owner.exited.then(() => {
    if (owner.exit) channels.receive({ runplane: "replica-exit", replica: id, exit: owner.exit }, undefined);
  });
  await owner.ready;
  const [socket] = await sockets;
  channels.receive({ runplane: "replica-channel", replica: id, label: owner.label, pid: owner.pid }, socket);
  const replica: CallableReplica = {
    get pid() {
      return owner.pid;
    },
    ready: owner.ready,
    exited: owner.exited.then(async () => {
      while (channels.holding) await sleep(50);
    }),
    wasReady: true,
    get usable() {
      return channels.holding;
    },
    call(call: ReplicaCall): Promise<CallOutcome> {
      const supervisor = {
        slot: () => Promise.resolve({ replica: id, graceMs: call.graceMs, keep: false, release: call.onSettled }),
        execute: () => Promise.reject(new Error("handed over to the supervisor: not run on the channel")),
      } as unknown as SupervisorCalls;
      const request = {
        projectId: "p-x",
        app: "contract",
        functionName: call.functionName,
        input: call.kwargs,
        inputJson: call.kwargsJson,
        runId: call.runId,
        signal: call.signal ?? new AbortController().signal,
      };
      return channels.execute(request, supervisor) as Promise<CallOutcome>;
    },
    async stop() {
      await owner.stop();
      await replica.exited;
    },
  };
  return { replica, close: () => owner.stop() };
}

const KINDS: ReplicaKind[] = [
  {
    name: "a Python worker (PythonReplica on its own pipes)",
    raised: PYTHON_RAISED,
    start(dir) {
      const replica = new PythonReplica({
        appDir: dir,
        label: "p-x/contract",
        python: "python3",
        concurrency: 4,
        logger: silent,
        sandbox: unjailedSandbox(),
        jail: { projectId: "p-x", cwd: dir, egress: false, env: {} },
      });
      return Promise.resolve({ replica, close: () => replica.stop() });
    },
  },
  {
    name: "a host's worker calling a supervisor's Python replica on its channel (WorkerChannels)",
    raised: PYTHON_RAISED,
    start: channelReplica,
  },
  {
    name: "a custom runtime's process (CustomProcessReplica)",
    raised: HTTP_RAISED,
    start(dir) {
      const replica = new CustomProcessReplica({
        appDir: dir,
        label: "p-x/contract",
        entrypoint: ["python3", "server.py"],
        logger: silent,
        sandbox: unjailedSandbox(),
        jail: { projectId: "p-x", cwd: dir, egress: false, env: {} },
      });
      return Promise.resolve({ replica, close: () => replica.stop() });
    },
  },
  {
    name: "an external url (UrlUpstream) served on loopback",
    raised: HTTP_RAISED,
    async start(dir) {
      const port = await freePort();
      const server: ChildProcess = spawn("python3", [join(dir, "server.py")], {
        env: { ...process.env, PORT: String(port) },
        stdio: "ignore",
      });
      const gone = new Promise((resolve) => server.once("exit", resolve));
      await listening(port);
      const replica = new UrlUpstream(`http://127.0.0.1:${port}`);
      return {
        replica,
        async close() {
          await replica.stop();
          server.kill("SIGKILL");
          await gone;
        },
      };
    },
  },
];

let calls = 0;

/** Calls `functionName`; `settled()` says whether the replica freed the call's slot. */
function callOn(
  replica: CallableReplica,
  functionName: string,
  options: { kwargs?: Record<string, unknown>; signal?: AbortSignal } = {},
) {
  let settled = false;
  const runId = `run_contract_${++calls}`;
  const outcome = replica.call({
    runId,
    functionName,
    kwargs: options.kwargs ?? {},
    graceMs: 60_000,
    signal: options.signal,
    onSettled: () => (settled = true),
  });
  return { runId, outcome, settled: () => settled };
}

/** A value as JSON would carry it (a Python result may come as checked JSON text). */
function plain(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value));
}

async function waitUntil(check: () => boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(50);
  }
}

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "runplane-replica-contract-"));
  await writeFile(join(dir, "main.py"), MAIN_PY);
  await writeFile(join(dir, "server.py"), SERVER_PY);
});
after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

for (const kind of KINDS) {
  describe(`replica contract: ${kind.name}`, () => {
    let subject: { replica: CallableReplica; close(): Promise<void> };
    before(async () => {
      subject = await kind.start(dir);
      await subject.replica.ready;
    });
    after(() => subject?.close());

    it("is usable once ready, and a call returns its function's result, its slot then free", async () => {
      const { replica } = subject;
      assert.equal(replica.usable, true);
      assert.equal(replica.wasReady, true);
      const call = callOn(replica, "echo", { kwargs: { n: 1, s: "two", list: [3] } });
      const outcome = await call.outcome;
      assert.equal(outcome.kind, "result");
      assert.deepEqual(plain((outcome as { result: unknown }).result), { n: 1, s: "two", list: [3] });
      await waitUntil(call.settled, "the call settled", 5_000);
    });

    it("fails a call whose function raised with a RunFailure of the kind's error type, naming the run", async () => {
      const call = callOn(subject.replica, "fail");
      await assert.rejects(call.outcome, (error: unknown) => {
        assert.ok(error instanceof RunFailure, `a RunFailure, not ${String(error)}`);
        assert.equal(error.errorType, kind.raised.errorType);
        assert.match(error.message, kind.raised.message);
        assert.equal(error.runId, call.runId);
        return true;
      });
      await waitUntil(call.settled, "the call settled", 5_000);
    });

    it("gives a stream's items in order, and frees the slot at its end", async () => {
      const call = callOn(subject.replica, "letters");
      const outcome = await call.outcome;
      assert.equal(outcome.kind, "stream");
      const values: unknown[] = [];
      for await (const item of (outcome as { items: AsyncIterable<{ value: unknown }> }).items) {
        values.push(plain(item.value));
      }
      assert.deepEqual(values, ["a", "b", "c"]);
      await waitUntil(call.settled, "the stream settled", 5_000);
    });

    it("is not usable once stopped, and its exit has resolved", async () => {
      const { replica } = subject;
      await replica.stop();
      assert.equal(replica.usable, false);
      await replica.exited;
    });
  });

  describe(`replica contract, interrupted: ${kind.name}`, () => {
    let subject: { replica: CallableReplica; close(): Promise<void> } | undefined;
    after(() => subject?.close());

    it("ends a call in flight as interrupted, in bounded time, when its signal aborts", async () => {
      subject = await kind.start(dir);
      await subject.replica.ready;
      const controller = new AbortController();
      const call = callOn(subject.replica, "nap", { kwargs: { seconds: 30 }, signal: controller.signal });
      let ended = false;
      void call.outcome.catch(() => undefined).finally(() => (ended = true));
      await sleep(500);
      assert.equal(ended, false, "the 30 s call still runs before the abort");
      const abortedAt = Date.now();
      controller.abort();
      await assert.rejects(call.outcome, (error: unknown) => {
        assert.ok(error instanceof RunFailure, `a RunFailure, not ${String(error)}`);
        assert.equal(error.errorType, "interrupted");
        assert.equal(error.runId, call.runId);
        return true;
      });
      await waitUntil(call.settled, "the interrupted call's slot was freed", INTERRUPT_BOUND_MS);
      const took = Date.now() - abortedAt;
      assert.ok(took < INTERRUPT_BOUND_MS, `interrupted after ${took} ms`);
    });
  });
}

describe("replica contract: a replica that could not be given a process (FailedReplica)", () => {
  const why = new ProblemError("app-unavailable", "p-x/contract: its replica's cgroup could not be made: no");

  it("never becomes ready: its ready rejects with why, and it is neither usable nor was ready", async () => {
    const replica: CallableReplica = new FailedReplica(why);
    await assert.rejects(replica.ready, (error: unknown) => error === why);
    assert.equal(replica.usable, false);
    assert.equal(replica.wasReady, false);
    assert.equal(replica.pid, undefined);
    await replica.exited;
  });

  it("refuses a call given to it anyway, freeing its slot", async () => {
    const replica: CallableReplica = new FailedReplica(why);
    const call = callOn(replica, "echo");
    await assert.rejects(call.outcome, /a replica that failed to start was given a call/);
    assert.equal(call.settled(), true);
  });

  it("stops at once, and stays not usable", async () => {
    const replica: CallableReplica = new FailedReplica(why);
    await replica.stop();
    assert.equal(replica.usable, false);
    await replica.exited;
  });
});
