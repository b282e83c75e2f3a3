import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { after, before, describe, it } from "node:test";
import Database from "better-sqlite3";
import WebSocket from "ws";
import type { components } from "../../generated/api.d.ts";
import { createRunplaneClient } from "../../client/mod.ts";
import { deployApp, hostPid, waitFor } from "../_helpers/apps.ts";
import { runMain } from "../_helpers/cli.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { WEBSOCKET_ECHO_APP } from "../_helpers/websocket_echo_app.ts";
import { openWebSocket, type OpenedWebSocket } from "../_helpers/websockets.ts";

type Run = components["schemas"]["Run"];

type Opened = OpenedWebSocket;

const MAX_MESSAGE = 2 * 1024 * 1024;
const TOML = '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n'
  + "[scaling]\nreplica_concurrency = 50\n";

describe("WebSocket runs to a custom runtime", () => {
  let t: TestServer;
  let appDir: string;

  /** Opens `/v4/p-test/<app>/<path>` (with the test token unless `token` is null) and reads its greeting. */
  function open(path: string, options: { app?: string; token?: string | null } = {}): Promise<Opened> {
    const token = options.token === undefined ? t.token : options.token;
    const url = `${t.url.replace("http", "ws")}/v4/${TEST_PROJECT}/${options.app ?? "ws"}/${path}`;
    return openWebSocket(url, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
  }

  /** The refusal of an upgrade: its status and problem document. */
  async function refused(path: string, options: { app?: string; token?: string | null } = {}) {
    const error = await open(path, options).then(
      () => assert.fail("the upgrade was accepted"),
      (error: Error & { status: number; response: IncomingMessage }) => error,
    );
    assert.equal(error.response.headers["content-type"], "application/problem+json");
    return { status: error.status, problem: JSON.parse(error.message) as { detail: string; type: string } };
  }

  async function mintTicket(app: string): Promise<string> {
    const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${app}/websocket-tickets`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}` },
    });
    assert.equal(response.status, 201);
    return ((await response.json()) as { ticket: string }).ticket;
  }

  /** The run's record once it ended. */
  async function endedRun(runId: string): Promise<Run> {
    let run: Run | undefined;
    await waitFor(async () => {
      const response = await checkedFetch(`${t.url}/v4/projects/${TEST_PROJECT}/apps/ws/runs/${runId}`, {
        headers: { Authorization: `Bearer ${t.token}` },
      });
      run = (await response.json()) as Run;
      return run.status !== "running";
    }, `run ${runId} to end`);
    return run!;
  }

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WS_MAX_MESSAGE: String(MAX_MESSAGE) } });
    appDir = await deployApp(t, "ws", { toml: TOML, files: { "server.py": WEBSOCKET_ECHO_APP } });
    await deployApp(t, "ws-other", { toml: TOML, files: { "server.py": WEBSOCKET_ECHO_APP } });
    await deployApp(t, "py", {
      toml: '[deployment]\nruntime = "python"\n',
      files: { "main.py": "def f():\n    return 1\n" },
    });
  });
  after(async () => {
    await t.close();
  });

  it("echoes text and binary messages of 1 B, 64 KiB and 1 MiB, and passes the path, query and run id", async () => {
    const c = await open("echo/deep?x=1&y=2");
    const greeting = JSON.parse((await c.next()).data.toString());
    assert.equal(greeting.path, "/echo/deep?x=1&y=2");
    assert.equal(greeting.request_id, c.runId);
    assert.ok(!greeting.headers.includes("authorization"), "the caller's token reached the app");
    for (const size of [1, 64 * 1024, 1024 * 1024]) {
      const text = "é".repeat(Math.max(1, size / 2));
      c.socket.send(text);
      const echoedText = await c.next();
      assert.equal(echoedText.isBinary, false);
      assert.equal(echoedText.data.toString(), text);
      const bytes = Buffer.alloc(size, size % 251);
      bytes[0] = 7;
      c.socket.send(bytes);
      const echoedBytes = await c.next();
      assert.equal(echoedBytes.isBinary, true);
      assert.ok(echoedBytes.data.equals(bytes), `the ${size}-byte binary message came back changed`);
    }
    c.socket.close(1000, "done");
    assert.deepEqual(await c.closed, { code: 1000, reason: "done" });
  });

  it("passes pings and pongs both ways", async () => {
    const c = await open("echo");
    await c.next();
    const pong = new Promise<string>((resolve) => c.socket.once("pong", (data: Buffer) => resolve(data.toString())));
    c.socket.ping("from-caller");
    assert.equal(await pong, "from-caller");
    // The app pings; the caller's automatic pong reaches it, and it says so.
    c.socket.send("cmd:ping:from-app");
    assert.equal((await c.next()).data.toString(), "pong:from-app");
    c.socket.close();
    await c.closed;
  });

  it("records the run: mode websocket, its messages and bytes each way, the caller's close code and reason", async () => {
    const c = await open("echo");
    await c.next();
    c.socket.send("abc");
    await c.next();
    c.socket.send(Buffer.alloc(10));
    await c.next();
    c.socket.close(4001, "caller says bye");
    assert.deepEqual(await c.closed, { code: 4001, reason: "caller says bye" });
    const run = await endedRun(c.runId);
    assert.equal(run.mode, "websocket");
    assert.equal(run.status, "success");
    assert.equal(run.function_name, "echo");
    assert.ok(run.completed_at !== null && run.run_time_ms !== null);
    const greetingBytes = run.websocket!.bytes_out - 13;
    assert.ok(greetingBytes > 0);
    assert.deepEqual(run.websocket, {
      messages_in: 2,
      messages_out: 3,
      bytes_in: 13,
      bytes_out: greetingBytes + 13,
      close_code: 4001,
      close_reason: "caller says bye",
      closed_by: "caller",
    });
  });

  it("passes the app's close code and reason to the caller", async () => {
    const c = await open("echo");
    await c.next();
    c.socket.send("cmd:close:4002:app says bye");
    assert.deepEqual(await c.closed, { code: 4002, reason: "app says bye" });
    const run = await endedRun(c.runId);
    assert.equal(run.status, "success");
    assert.equal(run.websocket?.closed_by, "app");
    assert.equal(run.websocket?.close_code, 4002);
  });

  it("holds one of the replica's slots while open and frees it at close", async () => {
    const c = await open("echo");
    await c.next();
    assert.equal(t.server.context.runtime.capacity(TEST_PROJECT, "ws").busy, 1);
    c.socket.close();
    await c.closed;
    await endedRun(c.runId);
    await waitFor(() => t.server.context.runtime.capacity(TEST_PROJECT, "ws").busy === 0, "the slot to be freed");
  });

  it("refuses an upgrade without a token, with a token in the URL, and to a Python app", async () => {
    const anonymous = await refused("echo", { token: null });
    assert.equal(anonymous.status, 401);
    const inUrl = await refused(`echo?token=${t.token}`, { token: null });
    assert.equal(inUrl.status, 400);
    assert.match(inUrl.problem.detail, /never accepted in a URL/);
    const python = await refused("f", { app: "py" });
    assert.equal(python.status, 400);
    assert.match(python.problem.detail, /Python app/);
  });

  it("opens one connection with a ticket, and refuses it used again or for another app", async () => {
    const ticket = await mintTicket("ws");
    const c = await open(`echo?ticket=${ticket}&keep=1`, { token: null });
    const greeting = JSON.parse((await c.next()).data.toString());
    assert.equal(greeting.path, "/echo?keep=1", "the ticket reached the app");
    c.socket.close();
    await c.closed;
    const used = await refused(`echo?ticket=${ticket}`, { token: null });
    assert.equal(used.status, 401);
    const otherTicket = await mintTicket("ws-other");
    const other = await refused(`echo?ticket=${otherTicket}`, { token: null });
    assert.equal(other.status, 403);
  });

  it("closes the connection with 1000 when its run is cancelled", async () => {
    const c = await open("echo");
    await c.next();
    const response = await checkedFetch(`${t.url}/v4/projects/${TEST_PROJECT}/apps/ws/runs/${c.runId}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${t.token}` },
    });
    assert.equal(response.status, 200);
    const closed = await c.closed;
    assert.equal(closed.code, 1000);
    assert.match(closed.reason, /cancelled/);
    const run = await endedRun(c.runId);
    assert.equal(run.status, "cancelled");
    assert.equal(run.websocket?.close_code, 1000);
    assert.equal(run.websocket?.closed_by, "server");
  });

  it("closes with 1009 when the caller or the app sends a message over RUNPLANE_WS_MAX_MESSAGE", async () => {
    const fromCaller = await open("echo");
    await fromCaller.next();
    fromCaller.socket.on("error", () => undefined);
    fromCaller.socket.send(Buffer.alloc(MAX_MESSAGE + 1));
    assert.equal((await fromCaller.closed).code, 1009);
    const callerRun = await endedRun(fromCaller.runId);
    assert.equal(callerRun.status, "failure");
    assert.equal(callerRun.error?.type, "too_large");

    const fromApp = await open("echo");
    await fromApp.next();
    fromApp.socket.send(`cmd:big:${MAX_MESSAGE + 1}`);
    assert.equal((await fromApp.closed).code, 1009);
    const appRun = await endedRun(fromApp.runId);
    assert.equal(appRun.error?.type, "too_large");
    assert.match(appRun.error?.message ?? "", /app's server sent a message larger/);
  });

  it("keeps what it holds for a slow reader bounded while the app floods", async () => {
    const c = await open("echo");
    await c.next();
    const registry = t.server.context.metrics.registry;
    const buffered = async () =>
      (await registry.getSingleMetric("runplane_websocket_buffered_bytes")!.get()).values[0].value;
    // The caller stops reading: the app's 64 MiB can only go as far as the kernel's buffers and the bound.
    c.socket.pause();
    c.socket.send("cmd:flood:256:262144");
    await waitFor(
      async () => (await buffered()) >= 512 * 1024,
      "the server to hold the flood for the slow reader",
      60_000,
    );
    let most = 0;
    for (let sample = 0; sample < 20; sample++) {
      most = Math.max(most, await buffered());
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.ok(most <= 4 * 1024 * 1024, `the server held ${most} bytes for one slow reader`);
    c.socket.resume();
    for (let i = 0; i < 256; i++) {
      const message = await c.next();
      assert.equal(message.data.length, 262144);
      assert.equal(message.data[0], i % 256, `message ${i} came out of order`);
    }
    assert.equal((await c.next()).data.toString(), "flood done");
    c.socket.close();
    await c.closed;
  });

  it("runplane ws sends stdin's lines as text messages and writes what comes back to stdout", async () => {
    const env = { RUNPLANE_API_URL: t.url, RUNPLANE_TOKEN: t.token };
    // Stdin stays open: the app closes once it has echoed the lines before its command.
    const stdin = new PassThrough();
    stdin.write("hello\né\ncmd:close:1000:done\n");
    const piped = await runMain(["ws", `${TEST_PROJECT}/ws/echo`], { env, stdin });
    stdin.end();
    assert.equal(piped.code, 0, piped.stderr);
    const [greeting, ...echoed] = piped.stdout.trimEnd().split("\n");
    assert.equal(JSON.parse(greeting).path, "/echo");
    assert.deepEqual(echoed, ["hello", "é"]);
    const anonymous = await runMain(["ws", `${TEST_PROJECT}/ws/echo`], {
      env: { RUNPLANE_API_URL: t.url },
      stdin: new PassThrough(),
    });
    assert.equal(anonymous.code, 1);
    assert.match(anonymous.stderr, /refused the WebSocket \(401\)/);
  });

  it("the client's connect() opens a WebSocket with a ticket, and refuses a Python app", async () => {
    const client = createRunplaneClient({ baseUrl: t.url, token: t.token });
    const socket = await client.connect(`${TEST_PROJECT}/ws`, "echo?x=1", { WebSocket });
    const greeting = await new Promise<Buffer>((resolve) => socket.once("message", resolve));
    assert.equal(JSON.parse(greeting.toString()).path, "/echo?x=1");
    const closed = new Promise((resolve) => socket.once("close", resolve));
    socket.close();
    await closed;
    await assert.rejects(client.connect(`${TEST_PROJECT}/py`, "f", { WebSocket }), { status: 400 });
  });

  it("closes with 1011 when the app's process is killed", async () => {
    const c = await open("echo");
    await c.next();
    c.socket.send("cmd:pid");
    const [, pid, start] = (await c.next()).data.toString().split(":");
    process.kill(hostPid(appDir, Number(pid), { startTime: Number(start) }), "SIGKILL");
    assert.equal((await c.closed).code, 1011);
    const run = await endedRun(c.runId);
    assert.equal(run.status, "failure");
    assert.equal(run.error?.type, "upstream_error");
    assert.equal(run.websocket?.close_code, 1011);
  });
});

describe("WebSocket runs when the server drains", () => {
  it("closes an open WebSocket with 1001 when the drain timeout ends, and ends its run interrupted", async () => {
    const t = await startTestServer();
    try {
      await deployApp(t, "ws", { toml: TOML, files: { "server.py": WEBSOCKET_ECHO_APP } });
      const socket = new WebSocket(`${t.url.replace("http", "ws")}/v4/${TEST_PROJECT}/ws/echo`, {
        headers: { Authorization: `Bearer ${t.token}` },
      });
      const runId = new Promise<string>((resolve) =>
        socket.once("upgrade", (response) => resolve(String(response.headers["x-request-id"])))
      );
      await new Promise((resolve) => socket.once("message", resolve));
      const closed = new Promise<{ code: number; reason: string }>((resolve) =>
        socket.once("close", (code, reason) => resolve({ code, reason: reason.toString() }))
      );
      await t.server.drain(100);
      assert.deepEqual(await closed, { code: 1001, reason: "The server is going away" });
      // The store is closed once drained: its SQLite file is read directly.
      const store = new Database(join(t.dataDir, "runplane.sqlite3"), { readonly: true });
      const row = store.prepare("select * from runs where run_id = ?").get(await runId) as
        | { status: string; error_type: string; websocket_json: string }
        | undefined;
      store.close();
      assert.equal(row?.status, "failure");
      assert.equal(row?.error_type, "interrupted");
      assert.equal(JSON.parse(row?.websocket_json ?? "null")?.close_code, 1001);
    } finally {
      await t.close();
    }
  });
});
