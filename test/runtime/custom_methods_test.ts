/**
 * A custom runtime's routes by every other HTTP method (issue 47): through the HTTP layer, and through
 * the two hops a call takes between processes — a host's worker to its supervisor (the Unix socket's
 * wire) and one host to another (the forwarded-call endpoint) — each to a real app.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { closeForwardConnections, forwardCall, forwardKey } from "../../server/cluster/mod.ts";
import { SupervisorCalls } from "../../server/host/call_client.ts";
import { listenForWorkerCalls, type WorkerCallsServer } from "../../server/host/call_server.ts";
import { parseMasterKey } from "../../server/keys/mod.ts";
import { createLogger } from "../../server/log.ts";
import { runtimeExecutor } from "../../server/placement/mod.ts";
import { type ExecutedCall, type ExecuteRequest, newRunId } from "../../server/runs/mod.ts";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { TEST_MASTER_KEY } from "../_helpers/postgres.ts";
import { getRun, rejection } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

// Echoes what it got; `/stream` writes a piece, then waits for `/release` before the rest (no sleeps).
const ECHO = `
import json, os, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

released = threading.Event()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def echo(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        if url.path == "/health":
            return self.answer(200, b"ok", "text/plain")
        if url.path == "/release":
            released.set()
            return self.answer(200, b"released", "text/plain")
        if url.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"first;")
            released.wait(30)
            released.clear()
            self.chunk(b"second;")
            self.chunk(b"")
            return
        if url.path == "/fail":
            return self.answer(404, b"no such thing", "text/plain")
        data = json.dumps({
            "method": self.command,
            "path": url.path,
            "query": url.query,
            "echo": self.headers.get("X-Echo"),
            "authorization": self.headers.get("Authorization"),
            "cookie": self.headers.get("Cookie"),
            "request_id": self.headers.get("X-Request-Id"),
            "content_type": self.headers.get("Content-Type"),
            "body": body.decode("latin-1"),
        }).encode()
        extra = {"Allow": "GET, PUT, OPTIONS", "Set-Cookie": "stolen=1"} if self.command == "OPTIONS" else {}
        self.answer(201 if self.command == "PUT" else 200, data, "application/json", extra)

    def answer(self, status, data, content_type, extra={}):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Echo-Method", self.command)
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def chunk(self, data):
        self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(data), data))
        self.wfile.flush()

    do_GET = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_POST = echo

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

const TOML = `[deployment]
runtime = "custom"
[scaling]
replica_concurrency = 4
[runtime.custom]
entrypoint = ["python3", "server.py"]
healthcheck_endpoint = "/health"
`;

type Echo = {
  method: string;
  path: string;
  query: string;
  echo: string | null;
  authorization: string | null;
  cookie: string | null;
  request_id: string;
  content_type: string | null;
  body: string;
};

describe("custom runtime: every HTTP method", () => {
  let t: TestServer;
  const url = (path: string) => `${t.url}/v4/${TEST_PROJECT}/${path}`;
  const auth = () => ({ Authorization: `Bearer ${t.token}` });
  let socketDir: string;
  let wire: WorkerCallsServer;
  let supervisor: SupervisorCalls;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_MASTER_KEY: TEST_MASTER_KEY } });
    socketDir = await mkdtemp(join(tmpdir(), "runplane-methods-"));
    const token = randomBytes(32);
    wire = await listenForWorkerCalls(join(socketDir, "supervisor.sock"), {
      token,
      executor: runtimeExecutor(t.server.context.runtime),
      bodyLimitBytes: 1024 * 1024,
      logger: createLogger({ level: "silent" }),
    });
    supervisor = new SupervisorCalls(join(socketDir, "supervisor.sock"), { token: token.toString("hex") });
    await deployApp(t, "methods", { toml: TOML, files: { "server.py": ECHO } });
    await deployApp(t, "pyapp", {
      toml: '[deployment]\nruntime = "python"\n',
      files: { "main.py": "def run():\n    return 1\n" },
    });
  });
  after(async () => {
    supervisor?.close();
    await wire?.close();
    await closeForwardConnections();
    await t?.close();
    if (socketDir) await rm(socketDir, { recursive: true, force: true });
  });

  /** The run the answer's `X-Request-Id` names, as `getRun` reads it. */
  async function runOf(response: Response, app = "methods") {
    const runId = response.headers.get("x-request-id")!;
    const { data } = await getRun({ client: t.client, project: TEST_PROJECT, app }, runId);
    assert.ok(data, `run ${runId} is recorded`);
    return data;
  }

  it("passes GET with a multi-segment path, the query string and a header, never the bearer token", async () => {
    const response = await checkedFetch(url("methods/items/a%2Fb/c?async=true&x=1&x=2"), {
      headers: { ...auth(), "X-Echo": "hello", Cookie: "runplane_session=secret" },
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-security-policy"), "sandbox");
    const echo = await response.json() as Echo;
    assert.equal(echo.method, "GET");
    assert.equal(echo.path, "/items/a%2Fb/c");
    assert.equal(echo.query, "async=true&x=1&x=2");
    assert.equal(echo.echo, "hello");
    assert.equal(echo.authorization, null);
    assert.equal(echo.cookie, null);
    assert.equal(echo.request_id, response.headers.get("x-request-id"));
    const run = await runOf(response);
    assert.equal(run.method, "GET");
    assert.equal(run.function_name, "items/a%2Fb/c");
    assert.equal(run.mode, "sync");
    assert.equal(run.status, "success");
    assert.deepEqual((run.result as Echo).path, "/items/a%2Fb/c");
  });

  it("passes PUT, PATCH and DELETE with their bodies in any media type, and the app's 2xx status", async () => {
    for (const method of ["PUT", "PATCH", "DELETE"]) {
      const response = await checkedFetch(url("methods/doc"), {
        method,
        headers: { ...auth(), "Content-Type": "text/csv" },
        body: `a,b\n1,${method}\n`,
      });
      assert.equal(response.status, method === "PUT" ? 201 : 200);
      const echo = await response.json() as Echo;
      assert.deepEqual([echo.method, echo.content_type, echo.body], [method, "text/csv", `a,b\n1,${method}\n`]);
      assert.equal((await runOf(response)).method, method);
    }
  });

  it("passes binary bodies unchanged", async () => {
    const bytes = new Uint8Array([0, 1, 2, 254, 255, 10, 13]);
    const response = await checkedFetch(url("methods/blob"), {
      method: "PUT",
      headers: { ...auth(), "Content-Type": "application/octet-stream" },
      body: bytes,
    });
    const echo = await response.json() as Echo;
    assert.deepEqual([...Buffer.from(echo.body, "latin1")], [...bytes]);
  });

  it("answers HEAD with the app's headers and no body", async () => {
    const response = await checkedFetch(url("methods/page"), { method: "HEAD", headers: auth() });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("x-echo-method"), "HEAD");
    assert.equal(await response.text(), "");
    const run = await runOf(response);
    assert.deepEqual([run.method, run.status], ["HEAD", "success"]);
  });

  it("passes OPTIONS and its Allow header through, without the app's cookies", async () => {
    const response = await checkedFetch(url("methods/page"), { method: "OPTIONS", headers: auth() });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("allow"), "GET, PUT, OPTIONS");
    assert.equal(response.headers.get("set-cookie"), null);
    assert.equal((await response.json() as Echo).method, "OPTIONS");
    assert.equal((await runOf(response)).method, "OPTIONS");
  });

  it("streams a chunked answer as the app writes it", async () => {
    const response = await checkedFetch(url("methods/stream"), { headers: auth() });
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    // The app holds its second piece until it is released: the first arrived on its own.
    assert.equal((await reader.read()).value, "first;");
    const release = await checkedFetch(url("methods/release"), { headers: auth() });
    assert.equal(await release.text(), "released");
    let rest = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += chunk.value;
    assert.equal(rest, "second;");
    const run = await runOf(response);
    assert.deepEqual([run.status, run.result], ["success", "first;second;"]);
  });

  it("answers 502 for an app's answer that is not 2xx, and records the run failed", async () => {
    const response = await checkedFetch(url("methods/fail"), { method: "DELETE", headers: auth() });
    assert.equal(response.status, 502);
    const problem = await response.json() as { detail: string; run_id: string };
    assert.match(problem.detail, /answered 404: no such thing/);
    const run = await runOf(response);
    assert.deepEqual([run.method, run.status, run.error?.type], ["DELETE", "failure", "upstream_error"]);
  });

  it("refuses a call without a token", async () => {
    const response = await checkedFetch(url("methods/page"), { method: "PUT" });
    assert.equal(response.status, 401);
  });

  it("answers 405 with Allow: POST for a Python app, and 404 for an unknown app", async () => {
    const python = await checkedFetch(url("pyapp/run"), { headers: auth() });
    assert.equal(python.status, 405);
    assert.equal(python.headers.get("allow"), "POST");
    assert.equal(python.headers.get("content-type"), "application/problem+json");
    const unknown = await checkedFetch(url("no-such-app/x"), { method: "PATCH", headers: auth() });
    assert.equal(unknown.status, 404);
  });

  /** A PATCH of `path` with a query string, a header and a binary body, as the HTTP layer hands it on. */
  function patchRequest(path: string): ExecuteRequest {
    return {
      projectId: TEST_PROJECT,
      app: "methods",
      functionName: path,
      input: {},
      runId: newRunId(),
      signal: new AbortController().signal,
      http: { method: "PATCH", query: "q=1", headers: [["x-echo", "hop"]], body: new Uint8Array([0, 255, 10]) },
    };
  }

  /** The answer's body as text, checking it is the app's answer to `request`. */
  async function echoOf(outcome: ExecutedCall, request: ExecuteRequest): Promise<Echo> {
    assert.equal(outcome.kind, "response");
    if (outcome.kind !== "response") throw new Error("not an answer");
    assert.ok(outcome.headers.some(([name, value]) => name === "x-echo-method" && value === "PATCH"));
    const chunks: Uint8Array[] = [];
    for await (const chunk of outcome.body) chunks.push(chunk);
    const echo = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Echo;
    assert.deepEqual(
      [echo.method, echo.path, echo.query, echo.echo, echo.request_id],
      ["PATCH", `/${request.functionName}`, "q=1", "hop", request.runId],
    );
    assert.deepEqual([...Buffer.from(echo.body, "latin1")], [0, 255, 10]);
    return echo;
  }

  it("passes a call by another method from a worker over the supervisor's socket", async () => {
    const request = patchRequest("over/the/wire");
    await echoOf(await supervisor.execute(request), request);
    // A chunked answer comes back piece by piece over the wire too.
    const stream = await supervisor.execute({
      ...patchRequest("stream"),
      http: { ...patchRequest("x").http!, method: "GET" },
    });
    assert.equal(stream.kind, "response");
    if (stream.kind !== "response") return;
    const pieces = stream.body[Symbol.asyncIterator]();
    assert.equal(Buffer.from((await pieces.next()).value as Uint8Array).toString(), "first;");
    await checkedFetch(url("methods/release"), { headers: auth() });
    let rest = "";
    for (let next = await pieces.next(); !next.done; next = await pieces.next()) {
      rest += Buffer.from(next.value).toString();
    }
    assert.equal(rest, "second;");
  });

  it("passes a call by another method from another host through the forwarded-call endpoint", async () => {
    const key = forwardKey(parseMasterKey(TEST_MASTER_KEY));
    const request = patchRequest("across/hosts");
    await echoOf(await forwardCall(t.url, request, { key }), request);
  });

  it("refuses a call by another method of a Python app on either hop with 405", async () => {
    const request = { ...patchRequest("run"), app: "pyapp" };
    const key = forwardKey(parseMasterKey(TEST_MASTER_KEY));
    for (const hop of [supervisor.execute(request), forwardCall(t.url, request, { key })]) {
      const error = await rejection(hop) as { status?: number; options?: { headers?: Record<string, string> } };
      assert.equal(error.status, 405);
      assert.equal(error.options?.headers?.Allow, "POST");
    }
  });
});
