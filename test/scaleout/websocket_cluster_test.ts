/**
 * WebSockets across the hosts of a cluster (issue 47): two processes on one PostgreSQL, the echo app's
 * only replica (min = max = 1) on one of them, every connection made to the other. The landing host
 * authenticates the caller, keeps the run's record and opens the replica on the holding host over the
 * internal endpoint, signed like a forwarded call; tickets are the cluster's, in the store.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { components } from "../../generated/api.d.ts";
import { hostPid } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
} from "../_helpers/server_process.ts";
import { WEBSOCKET_ECHO_APP } from "../_helpers/websocket_echo_app.ts";
import { openWebSocket, type OpenedWebSocket } from "../_helpers/websockets.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

type Run = components["schemas"]["Run"];

const POSTGRES = (await engines()).includes("postgres");
const TOML = '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n'
  + "[scaling]\nmin_replicas = 1\nmax_replicas = 1\nreplica_concurrency = 20\ncooldown = 300\n";

type Opened = OpenedWebSocket;

/** Opens `url` and resolves at its 101; rejects with the refusal's status and body. */
function openSocket(url: string, headers: Record<string, string>): Promise<Opened> {
  return openWebSocket(url, { headers });
}

describe("WebSockets across two hosts of a cluster", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  const dirs: ServerDirs[] = [];
  const appDirs: string[] = [];
  const hosts: ServerProcess[] = [];
  /** The host holding the replica, and the one every connection lands on. */
  let holder: ServerProcess;
  let landing: ServerProcess;

  function open(path: string, options: { token?: string | null } = {}): Promise<Opened> {
    const token = options.token === undefined ? landing.token : options.token;
    const url = `${landing.url.replace("http", "ws")}/v4/${PROCESS_PROJECT}/ws/${path}`;
    return openSocket(url, token ? { Authorization: `Bearer ${token}` } : {});
  }

  async function refusedStatus(path: string, options: { token?: string | null } = {}): Promise<number> {
    const error = await open(path, options).then(
      () => assert.fail("the upgrade was accepted"),
      (error: Error & { status: number }) => error,
    );
    return error.status;
  }

  /** Replicas of the app on each host (starting, idle or busy), as each host's getApp says. */
  async function readyPerHost(): Promise<number[]> {
    return await Promise.all(hosts.map(async (host) => {
      const response = await checkedFetch(`${host.url}/v3/projects/${PROCESS_PROJECT}/apps/ws`, {
        headers: { Authorization: `Bearer ${host.token}` },
      });
      // A host still loading its apps answers 404 for now: counted as not a number, so not yet one.
      if (response.status !== 200) return NaN;
      const { replicas } = (await response.json()) as { replicas: { idle: number; busy: number; starting: number } };
      return replicas.idle + replicas.busy + replicas.starting;
    }));
  }

  /** The run's record, read on `host`, once it ended. */
  async function endedRun(runId: string, host = landing): Promise<Run> {
    return await eventually(
      async () => {
        const response = await checkedFetch(`${host.url}/v4/projects/${PROCESS_PROJECT}/apps/ws/runs/${runId}`, {
          headers: { Authorization: `Bearer ${host.token}` },
        });
        const run = (await response.json()) as Run;
        return run.status === "running" ? undefined : run;
      },
      60_000,
      `run ${runId} to end`,
    );
  }

  before(async () => {
    database = await createTestDatabase();
    for (const name of ["a", "b"]) {
      const d = await makeServerDirs(`runplane-wscluster-${name}-`);
      dirs.push(d);
      appDirs.push(await d.deploy("ws", { "runplane.toml": TOML, "server.py": WEBSOCKET_ECHO_APP }));
    }
    hosts.push(await startClusterHost(dirs[0], { databaseUrl: database.url }));
    hosts.push(await startClusterHost(dirs[1], { databaseUrl: database.url, token: hosts[0].token }));
    const perHost = await eventually(
      async () => {
        const counts = await readyPerHost();
        return counts.reduce((a, b) => a + b, 0) === 1 ? counts : undefined;
      },
      120_000,
      "the app's one warm replica",
    );
    holder = hosts[perHost.indexOf(1)];
    landing = hosts[1 - perHost.indexOf(1)];
  });
  after(async () => {
    await Promise.all(hosts.map((host) => host.kill()));
    await database?.drop();
    for (const d of dirs) await d.remove();
  });

  it("echoes text and binary through the host that holds the replica, and passes the path, query and run id", async () => {
    const c = await open("echo/deep?x=1");
    const greeting = JSON.parse((await c.next()).data.toString());
    assert.equal(greeting.path, "/echo/deep?x=1");
    assert.equal(greeting.request_id, c.runId);
    assert.ok(!greeting.headers.includes("authorization"), "the caller's token reached the app");
    for (const size of [1, 64 * 1024, 300 * 1024]) {
      const text = "é".repeat(Math.max(1, size / 2));
      c.socket.send(text);
      const echoedText = await c.next();
      assert.equal(echoedText.isBinary, false);
      assert.equal(echoedText.data.toString(), text);
      const bytes = Buffer.alloc(size, size % 251);
      c.socket.send(bytes);
      const echoedBytes = await c.next();
      assert.equal(echoedBytes.isBinary, true);
      assert.ok(echoedBytes.data.equals(bytes), `the ${size}-byte binary message came back changed`);
    }
    c.socket.close(1000, "done");
    assert.deepEqual(await c.closed, { code: 1000, reason: "done" });
    // Still the one replica, on the holder: the landing host placed none.
    assert.deepEqual(await readyPerHost(), hosts.map((h) => (h === holder ? 1 : 0)));
  });

  it("records the run once on the landing host: mode websocket, its counters and the caller's close", async () => {
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
    // The holder reads the same record from the shared store.
    assert.deepEqual((await endedRun(c.runId, holder)).websocket, run.websocket);
  });

  it("passes the app's close code and reason back through both hops", async () => {
    const c = await open("echo");
    await c.next();
    c.socket.send("cmd:close:4002:app says bye");
    assert.deepEqual(await c.closed, { code: 4002, reason: "app says bye" });
    const run = await endedRun(c.runId);
    assert.equal(run.websocket?.closed_by, "app");
    assert.equal(run.websocket?.close_code, 4002);
  });

  it("opens a connection with a ticket minted on the other host, once", async () => {
    const response = await checkedFetch(`${holder.url}/v3/projects/${PROCESS_PROJECT}/apps/ws/websocket-tickets`, {
      method: "POST",
      headers: { Authorization: `Bearer ${holder.token}` },
    });
    assert.equal(response.status, 201);
    const { ticket } = (await response.json()) as { ticket: string };
    const c = await open(`echo?ticket=${ticket}&keep=1`, { token: null });
    const greeting = JSON.parse((await c.next()).data.toString());
    assert.equal(greeting.path, "/echo?keep=1", "the ticket reached the app");
    c.socket.close();
    await c.closed;
    assert.equal(await refusedStatus(`echo?ticket=${ticket}`, { token: null }), 401);
  });

  it("closes the connection with 1000 when its run is cancelled on the landing host", async () => {
    const c = await open("echo");
    await c.next();
    const response = await checkedFetch(`${landing.url}/v4/projects/${PROCESS_PROJECT}/apps/ws/runs/${c.runId}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${landing.token}` },
    });
    assert.equal(response.status, 200);
    const closed = await c.closed;
    assert.equal(closed.code, 1000);
    assert.match(closed.reason, /cancelled/);
    const run = await endedRun(c.runId);
    assert.equal(run.status, "cancelled");
    assert.equal(run.websocket?.closed_by, "server");
  });

  it("refuses an internal upgrade that no cluster host signed", async () => {
    const url = `${holder.url.replace("http", "ws")}/internal/v1/websockets/${PROCESS_PROJECT}/ws/echo`;
    const forged = `v1,${Date.now()},${"0".repeat(64)}`;
    const attempts: Array<Record<string, string>> = [{}, { "X-Request-Id": "r-1", "X-Runplane-Forwarded": forged }];
    for (const headers of attempts) {
      const error = await openSocket(url, headers).then(
        () => assert.fail("an unsigned internal upgrade was accepted"),
        (error: Error & { status: number }) => error,
      );
      assert.equal(error.status, 401);
    }
  });

  it("closes the caller with 1011 when the replica on the other host dies, and records the failure", async () => {
    const c = await open("echo");
    await c.next();
    c.socket.send("cmd:pid");
    const [, pid, start] = (await c.next()).data.toString().split(":");
    process.kill(hostPid(appDirs[hosts.indexOf(holder)], Number(pid), { startTime: Number(start) }), "SIGKILL");
    assert.equal((await c.closed).code, 1011);
    const run = await endedRun(c.runId);
    assert.equal(run.status, "failure");
    assert.equal(run.error?.type, "upstream_error");
    assert.equal(run.websocket?.close_code, 1011);
  });
});
