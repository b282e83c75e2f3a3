import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { alive, callFunction, deployApp, hostPid, replicaPid, waitFor } from "../_helpers/apps.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";

// Functions that break the worker protocol from inside, as any app can: fd 4 is the worker's answer pipe.
const HOSTILE = `
import os, time

def pid():
    return os.getpid()

def garbage():
    os.write(4, b"not json\\n")
    time.sleep(30)

def unknown_op(run_id):
    os.write(4, b'{"op":"explode","id":"' + run_id.encode() + b'"}\\n')
    time.sleep(30)

def flood():
    chunk = b"x" * (1 << 20)
    for _ in range(80):
        os.write(4, chunk)
    time.sleep(30)

def forged():
    os.write(4, b'{"op":"result","id":"run_someone_else","value":"stolen"}\\n')
    time.sleep(30)

def bad_payload(run_id):
    payload = b'{"a": [1,}'
    os.write(4, b'{"op":"result","id":"' + run_id.encode() + b'","bytes":' + str(len(payload)).encode() + b'}\\n' + payload)
    time.sleep(30)

def closed():
    os.close(4)
    time.sleep(30)
`;

const GOOD = `
import time

def slow(x):
    time.sleep(1.5)
    return x
`;

describe("a worker that breaks the protocol ends alone", () => {
  let t: TestServer;
  let hostileDir: string;
  before(async () => {
    t = await startTestServer();
    const toml = "[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\nresponse_grace_period = 60\n";
    hostileDir = await deployApp(t, "hostile", { toml, files: { "main.py": HOSTILE } });
    await deployApp(t, "good", { toml, files: { "main.py": GOOD } });
  });
  after(() => t.close());

  const cases = [
    { fn: "garbage", reason: /not JSON/ },
    { fn: "unknown_op", reason: /unknown op "explode"/ },
    { fn: "flood", reason: /more than 64 MiB without a newline/ },
    { fn: "forged", reason: /result message for call "run_someone_else", which it was never given/ },
    { fn: "bad_payload", reason: /a result payload that is not JSON text: an unexpected character at byte 9/ },
    { fn: "closed", reason: /closed its message pipe/ },
  ];
  for (const { fn, reason } of cases) {
    it(`${fn}: the call gets a 502 naming the violation, the worker is replaced, another app's call succeeds`, async () => {
      const before = await callFunction(t, "hostile", "pid");
      // The worker reports its pid in its sandbox; the host's pid, and the replica's the server logs.
      const oldPid = hostPid(hostileDir, before.data!.result as number);
      const oldReplica = replicaPid(oldPid);
      const started = performance.now();
      const innocent = callFunction(t, "good", "slow", { x: fn });
      // Let the innocent call reach its worker first, so both are in flight at once.
      await new Promise((resolve) => setTimeout(resolve, 200));
      const [hostile, other] = await Promise.all([callFunction(t, "hostile", fn), innocent]);
      assert.equal(hostile.response.status, 502);
      assert.equal(hostile.error?.type, "https://runplane.dev/problems/bad-gateway");
      assert.match(String(hostile.error?.detail), /broke the worker protocol/);
      assert.match(String(hostile.error?.detail), reason);
      assert.equal(other.response.status, 200);
      assert.equal(other.data?.result, fn);
      assert.ok(performance.now() - started < 20_000, "the hostile call did not wait for its grace period");
      await waitFor(() => !alive(oldPid) && !alive(oldReplica), "the hostile worker to be killed");
      const after = await callFunction(t, "hostile", "pid");
      assert.equal(after.response.status, 200);
      assert.notEqual(hostPid(hostileDir, after.data!.result as number), oldPid);
      const logged = t.logs.find((l) => l.msg === "worker broke the protocol; replacing it" && l.pid === oldReplica);
      assert.ok(logged, "the violation is logged with the worker's pid");
    });
  }
});

describe("a custom runtime that answers garbage fails its call alone", () => {
  let t: TestServer;
  let upstream: Server;
  before(async () => {
    t = await startTestServer();
    // Answers every call with endless bytes: a JSON body, or an event, that never ends.
    upstream = createServer((req, res) => {
      const stream = req.url === "/events";
      res.writeHead(200, { "Content-Type": stream ? "text/event-stream" : "application/json" });
      if (stream) res.write("data: ");
      const chunk = Buffer.alloc(1 << 20, "x");
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
        if (!res.destroyed) res.once("drain", pump);
      };
      res.on("error", () => undefined);
      pump();
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const port = (upstream.address() as AddressInfo).port;
    await deployApp(t, "endless", {
      toml: `[deployment]\nruntime = "custom"\n[runtime.custom]\nurl = "http://127.0.0.1:${port}"\n`,
    });
    await deployApp(t, "good", {
      toml: "[scaling]\nmax_replicas = 1\nresponse_grace_period = 60\n",
      files: { "main.py": GOOD },
    });
  });
  after(async () => {
    upstream.closeAllConnections();
    upstream.close();
    await t.close();
  });

  it("an endless body is a 502 once it passes 64 MiB, and another app's call succeeds", async () => {
    const innocent = callFunction(t, "good", "slow", { x: 1 });
    const endless = await callFunction(t, "endless", "result");
    assert.equal(endless.response.status, 502);
    assert.match(String(endless.error?.detail), /larger than 64 MiB/);
    assert.equal((await innocent).data?.result, 1);
  });

  it("an endless event ends the stream with an error event", async () => {
    const response = await fetch(`${t.url}/v4/p-test/endless/events`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    assert.equal(response.status, 200);
    const text = await response.text();
    assert.match(text, /event: error/);
    assert.match(text, /larger than 64 MiB/);
  });
});
