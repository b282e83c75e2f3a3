import assert from "node:assert/strict";
import { readFile, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { alive, callFunction, deployApp, hostPid, replicaPid, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const EXAMPLE = new URL("../../examples/apps/p-demo/custom/", import.meta.url);

const SICKLY = `
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        status = 500 if os.path.exists(".sick") else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        # The pid in its sandbox and the start time (the same in every namespace): an old and a new
        # replica may both be pid 3 in their own sandboxes.
        start = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19]
        data = f"[{os.getpid()}, {start}]".encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

type Echo = { echo: Record<string, unknown>; pid: number; request_id: string };

describe("custom runtime", () => {
  let t: TestServer;
  let upstream: Server;
  let customDir: string;
  let sicklyDir: string;
  let elsewhere: Server;
  const elsewhereHits: string[] = [];
  before(async () => {
    elsewhere = createServer((req, res) => {
      elsewhereHits.push(`${req.method} ${req.url}`);
      res.setHeader("Content-Type", "application/json");
      res.end('{"secret":"elsewhere"}');
    });
    await new Promise<void>((resolve) => elsewhere.listen(0, "127.0.0.1", resolve));
    const elsewherePort = (elsewhere.address() as AddressInfo).port;
    t = await startTestServer();
    const server = await readFile(new URL("server.py", EXAMPLE), "utf8");
    const toml = await readFile(new URL("runplane.toml", EXAMPLE), "utf8");
    customDir = await deployApp(t, "custom", { toml, files: { "server.py": server } });
    sicklyDir = await deployApp(t, "sickly", {
      toml:
        '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\nhealthcheck_endpoint = "/health"\n',
      files: { "server.py": SICKLY },
    });
    upstream = createServer((req, res) => {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        if (req.url === "/redirect") {
          res.writeHead(307, { Location: `http://127.0.0.1:${elsewherePort}/steal` }).end("moved");
          return;
        }
        res.setHeader("Content-Type", "application/json");
        res.end(JSON.stringify({ path: req.url, body: JSON.parse(body), requestId: req.headers["x-request-id"] }));
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const port = (upstream.address() as AddressInfo).port;
    await deployApp(t, "remote", {
      toml: `[deployment]\nruntime = "custom"\n[runtime.custom]\nurl = "http://127.0.0.1:${port}"\n`,
      files: {},
    });
  });
  after(async () => {
    await t.close();
    upstream.close();
    elsewhere.close();
  });

  it("forwards a sync call with its body and X-Request-Id and returns the upstream JSON as the result", async () => {
    const { data, response } = await callFunction(t, "custom", "echo", { hello: "world" });
    assert.equal(response.status, 200);
    const result = data?.result as Echo;
    assert.deepEqual(result.echo, { hello: "world" });
    assert.equal(result.request_id, data?.run_id);
  });

  it("streams the upstream's server-sent events as they arrive", async () => {
    const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/custom/events`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ count: 3, delay: 0.5 }),
    });
    assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    const started = Date.now();
    const first = await reader.read();
    assert.equal(first.value, "data: event 0\n\n");
    let rest = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += chunk.value;
    assert.ok(Date.now() - started >= 900, "the first event came before the upstream finished");
    assert.equal(rest, "data: event 1\n\ndata: event 2\n\nevent: done\ndata: line one\ndata: line two\n\n");
  });

  it("answers 502 when the upstream answers an error status", async () => {
    const { error, response } = await callFunction(t, "custom", "no-such-path");
    assert.equal(response.status, 502);
    assert.match(error?.detail ?? "", /answered 404/);
  });

  it("restarts a replica that was killed", async () => {
    const before = (await callFunction(t, "custom", "echo")).data?.result as Echo;
    // The app reports its pid in its sandbox's namespace; the host's is the one to kill. The replica the
    // server started (the sandbox around the app and its relay) must end with it.
    const pid = hostPid(customDir, before.pid);
    const replica = replicaPid(pid);
    process.kill(pid, "SIGKILL");
    await waitFor(() => !alive(pid) && !alive(replica), "the replica to die");
    // And the server to hear of it: CI's loaded run once sent the next call before it had (a 502).
    await waitFor(
      () => t.logs.some((line) => line.msg === "replica exited unexpectedly" && line.pid === replica),
      "the server to see the replica exit",
    );
    const after = await callFunction(t, "custom", "echo", { again: true });
    assert.equal(after.response.status, 200);
    assert.notEqual(hostPid(customDir, (after.data?.result as Echo).pid), pid);
  });

  it("restarts a replica whose health check fails", async () => {
    const [reported, startTime] = (await callFunction(t, "sickly", "x")).data?.result as [number, number];
    // The app's pid on the host, and the replica's (its sandbox's) pid the server logs.
    const pid = hostPid(sicklyDir, reported, { startTime });
    const replica = replicaPid(pid);
    // A dot file does not count as a change of the app (which would reload it).
    await writeFile(join(sicklyDir, ".sick"), "");
    await waitFor(() => !alive(pid), "the unhealthy replica to be killed", 15_000);
    assert.ok(
      t.logs.some((l) => l.msg === "custom runtime failed its health check; restarting it" && l.pid === replica),
    );
    await rm(join(sicklyDir, ".sick"));
    await waitFor(
      async () => {
        const answer = await callFunction(t, "sickly", "x");
        const [nextReported, nextStart] = (answer.data?.result ?? []) as [number, number];
        return answer.response.status === 200 && (nextReported !== reported || nextStart !== startTime);
      },
      "a healthy replacement",
      15_000,
    );
  });

  it("forwards to an external url without managing a process", async () => {
    const { data } = await callFunction(t, "remote", "hook", { a: 1 });
    assert.deepEqual(data?.result, { path: "/hook", body: { a: 1 }, requestId: data?.run_id });
  });

  it("never follows an upstream's redirect: the call fails with 502 and the other address hears nothing", async () => {
    const { error, response } = await callFunction(t, "remote", "redirect", { a: 1 });
    assert.equal(response.status, 502);
    assert.match(error?.detail ?? "", /answered 307/);
    assert.doesNotMatch(error?.detail ?? "", /elsewhere/);
    assert.deepEqual(elsewhereHits, []);
  });
});
