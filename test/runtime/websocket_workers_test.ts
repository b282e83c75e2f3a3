/**
 * WebSocket runs on a host with workers (issue 47, `RUNPLANE_WORKERS` > 1): a worker hands each upgrade
 * it takes to the supervisor, where the replicas are, so WebSockets work through every worker as on one
 * process: frames both ways, close codes, tickets minted through any worker, the run record, cancel, and
 * the host's drain closing open sockets with 1001. Each WebSocket is a connection of its own, which the
 * host's round robin gives to the next worker.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { components } from "../../generated/api.d.ts";
import { waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { connection } from "../_helpers/host_calls.ts";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";
import { WEBSOCKET_ECHO_APP } from "../_helpers/websocket_echo_app.ts";
import { openWebSocket, type OpenedWebSocket } from "../_helpers/websockets.ts";

type Run = components["schemas"]["Run"];

type Opened = OpenedWebSocket;

const PROJECT = "p-demo";
const TOML = '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n'
  + "[scaling]\nreplica_concurrency = 50\n";

describe("WebSocket runs through a host's two workers", () => {
  let dirs: ServerDirs;
  let server: ServerProcess;

  /** Opens `/v4/p-demo/ws/<path>` on a new connection (the bearer token unless `ticket`) and reads its greeting. */
  function open(path: string, options: { ticket?: string } = {}): Promise<Opened> {
    const query = options.ticket ? `${path.includes("?") ? "&" : "?"}ticket=${options.ticket}` : "";
    const url = `${server.url.replace("http", "ws")}/v4/${PROJECT}/ws/${path}${query}`;
    const headers: Record<string, string> = options.ticket ? {} : { Authorization: `Bearer ${server.token}` };
    return openWebSocket(url, { headers });
  }

  /** A ticket for the app, minted over REST on a connection of its own (so through the next worker). */
  async function mintTicket(): Promise<string> {
    const response = await checkedFetch(`${server.url}/v3/projects/${PROJECT}/apps/ws/websocket-tickets`, {
      method: "POST",
      headers: { Authorization: `Bearer ${server.token}` },
      dispatcher: connection(),
    } as RequestInit);
    assert.equal(response.status, 201, await response.clone().text());
    return ((await response.json()) as { ticket: string }).ticket;
  }

  /** The run's record once it ended. */
  async function endedRun(runId: string): Promise<Run> {
    let run: Run | undefined;
    await waitFor(async () => {
      const response = await checkedFetch(`${server.url}/v4/projects/${PROJECT}/apps/ws/runs/${runId}`, {
        headers: { Authorization: `Bearer ${server.token}` },
        dispatcher: connection(),
      } as RequestInit);
      run = (await response.json()) as Run;
      return run.status !== "running";
    }, `run ${runId} to end`);
    return run!;
  }

  before(async () => {
    dirs = await makeServerDirs("runplane-ws-workers-");
    await dirs.deploy("ws", { "runplane.toml": TOML, "server.py": WEBSOCKET_ECHO_APP });
    server = await startServerProcess({ ...dirs.env, RUNPLANE_WORKERS: "2", RUNPLANE_DRAIN_TIMEOUT: "1s" });
  });
  after(async () => {
    if (server && server.child.exitCode === null && server.child.signalCode === null) await server.kill();
    await dirs?.remove();
  });

  it("echoes text and binary messages and passes the caller's close code, recorded as the run", async () => {
    const c = await open("echo/deep?x=1");
    const greeting = JSON.parse((await c.next()).data.toString());
    assert.equal(greeting.path, "/echo/deep?x=1");
    assert.equal(greeting.request_id, c.runId);
    c.socket.send("abc");
    const text = await c.next();
    assert.deepEqual([text.isBinary, text.data.toString()], [false, "abc"]);
    const bytes = Buffer.alloc(70_000, 9);
    c.socket.send(bytes);
    const binary = await c.next();
    assert.equal(binary.isBinary, true);
    assert.ok(binary.data.equals(bytes), "the binary message came back changed");
    c.socket.close(4001, "caller says bye");
    assert.deepEqual(await c.closed, { code: 4001, reason: "caller says bye" });
    const run = await endedRun(c.runId);
    assert.equal(run.mode, "websocket");
    assert.equal(run.status, "success");
    assert.equal(run.websocket?.messages_in, 2);
    assert.equal(run.websocket?.messages_out, 3);
    assert.equal(run.websocket?.bytes_in, 70_003);
    assert.equal(run.websocket?.close_code, 4001);
    assert.equal(run.websocket?.closed_by, "caller");
  });

  it("passes the app's close code to the caller", async () => {
    const c = await open("echo");
    await c.next();
    c.socket.send("cmd:close:4002:app says bye");
    assert.deepEqual(await c.closed, { code: 4002, reason: "app says bye" });
  });

  it("opens a connection with a ticket minted through any worker, once", async () => {
    for (let i = 0; i < 2; i++) {
      const ticket = await mintTicket();
      const c = await open("echo", { ticket });
      await c.next();
      c.socket.send("with a ticket");
      assert.equal((await c.next()).data.toString(), "with a ticket");
      c.socket.close();
      await c.closed;
      const used = await open("echo", { ticket }).then(
        () => assert.fail("a used ticket opened a connection"),
        (error: Error & { status: number }) => error,
      );
      assert.equal(used.status, 401, used.message);
    }
  });

  it("serves several connections at once, spread over the workers", async () => {
    const all = await Promise.all(Array.from({ length: 6 }, () => open("echo")));
    await Promise.all(all.map((c) => c.next()));
    assert.equal(new Set(all.map((c) => c.runId)).size, all.length);
    all.forEach((c, i) => c.socket.send(`message ${i}`));
    const echoes = await Promise.all(all.map((c) => c.next()));
    assert.deepEqual(echoes.map((m) => m.data.toString()), all.map((_, i) => `message ${i}`));
    for (const c of all) c.socket.close(1000);
    await Promise.all(all.map((c) => c.closed));
  });

  it("closes the connection with 1000 when its run is cancelled through a worker", async () => {
    const c = await open("echo");
    await c.next();
    const response = await checkedFetch(`${server.url}/v4/projects/${PROJECT}/apps/ws/runs/${c.runId}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${server.token}` },
      dispatcher: connection(),
    } as RequestInit);
    assert.equal(response.status, 200, await response.clone().text());
    const closed = await c.closed;
    assert.equal(closed.code, 1000);
    assert.equal((await endedRun(c.runId)).status, "cancelled");
  });

  it("closes an open WebSocket with 1001 when the host's drain timeout ends, and exits 0", async () => {
    const c = await open("echo");
    await c.next();
    process.kill(server.child.pid!, "SIGTERM");
    assert.deepEqual(await c.closed, { code: 1001, reason: "The server is going away" });
    const exit = await server.exited;
    assert.equal(exit.code, 0, server.stderr());
  });
});
