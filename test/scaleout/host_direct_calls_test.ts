/**
 * A host's workers call its Python replicas directly (issue 33): each replica serves a channel per
 * worker, the supervisor hands them out and keeps the replicas' life and slots. Calls, streams and the
 * function's output go over a worker's channel; a replica that crashes, overruns its time or writes junk
 * on its channels fails the call it had as on one process, and the host goes on; a worker started in a
 * dead one's place calls directly too (`runplane_worker_calls_total` says which way calls went).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { Agent } from "undici";
import { waitFor } from "../_helpers/apps.ts";
import { cgroupsWork } from "../_helpers/cgroups.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { callThrough } from "../_helpers/host_calls.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { nodeChildren } from "../_helpers/process_tree.ts";
import { makeServerDirs, type ServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const PROJECT = "p-demo";

const APP = `import os, sys, time

def echo(text=""):
    return {"text": text, "pid": os.getpid()}

def talk(lines=3):
    for i in range(lines):
        print(f"line {i} of a direct call")
    print("to stderr", file=sys.stderr)
    return {"said": lines}

def ticks(n=5):
    for i in range(n):
        yield {"tick": i}

def crash():
    os._exit(1)

def slow(seconds=5):
    time.sleep(seconds)
    return {"slept": seconds}

def junk():
    # Hostile: every descriptor past the server's own two gets a line that is not the protocol.
    for fd in range(5, 64):
        try:
            os.write(fd, b"this is not the worker protocol\\n")
        except OSError:
            pass
    time.sleep(1)
    return {"wrote": "junk"}
`;

const TOML = `[deployment]\nname = "direct"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 8\n`
  + `response_grace_period = 2\n`;

/** An app with a memory limit, and a function that passes it. */
const HUNGRY = `import os

def echo():
    return {"pid": os.getpid()}

def hog(mib=1024):
    # Filled, not just reserved: the pages count.
    chunks = []
    for _ in range(mib // 16):
        chunks.append(os.urandom(1) * (16 << 20))
    return len(chunks)
`;

const HUNGRY_TOML = `[deployment]\nname = "hungry"\n\n[scaling]\nmax_replicas = 1\n\n[hardware]\nmemory = 0.25\n`;

/** A custom runtime: any HTTP server (here one that answers with its pid). */
const SERVER = `import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        data = json.dumps({"pid": os.getpid()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

const SERVER_TOML =
  `[deployment]\nname = "http"\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n`
  + `healthcheck_endpoint = "/health"\n`;

type Problem = { type?: string; detail?: string; run_id?: string };

for (const engine of await engines()) {
  describe(`a host's workers calling its replicas directly (${engine})`, () => {
    let dirs: ServerDirs;
    let database: TestDatabase | undefined;
    let server: ServerProcess;

    before(async () => {
      dirs = await makeServerDirs("runplane-direct-");
      await dirs.deploy("direct", { "runplane.toml": TOML, "main.py": APP });
      await dirs.deploy("http", { "runplane.toml": SERVER_TOML, "server.py": SERVER });
      await dirs.deploy("hungry", { "runplane.toml": HUNGRY_TOML, "main.py": HUNGRY });
      database = engine === "postgres" ? await createTestDatabase() : undefined;
      server = await startServerProcess({
        ...dirs.env,
        ...(database ? { RUNPLANE_DATABASE_URL: database.url } : {}),
        RUNPLANE_WORKERS: "2",
        RUNPLANE_SANDBOX: "off",
        RUNPLANE_RUN_LEASE: "3s",
      });
    });
    after(async () => {
      if (server && server.child.exitCode === null && server.child.signalCode === null) await server.kill();
      await database?.drop();
      await dirs?.remove();
    });

    async function call(
      fn: string,
      body: Record<string, unknown>,
      options: { via?: Agent; accept?: string; app?: string } = {},
    ) {
      const headers: Record<string, string> = options.accept ? { Accept: options.accept } : {};
      return await callThrough(server, `/v4/${PROJECT}/${options.app ?? "direct"}/${fn}`, body, {
        ...options,
        headers,
      });
    }

    /** The host's `runplane_worker_calls_total` by path (every process's, summed). */
    async function callsByPath(): Promise<{ direct: number; handed_over: number }> {
      const response = await checkedFetch(`${server.url}/metrics`, {
        headers: { Authorization: `Bearer ${server.token}` },
      });
      const text = await response.text();
      const count = (path: string) =>
        Number(new RegExp(`^runplane_worker_calls_total\\{path="${path}"\\} (\\d+)`, "m").exec(text)?.[1] ?? 0);
      return { direct: count("direct"), handed_over: count("handed_over") };
    }

    /** The workers' pids: the supervisor's children that run Node. */
    async function workerPids(): Promise<number[]> {
      return await nodeChildren(server.child.pid!);
    }

    /** Warm: the replica is up and both workers hold its channel (its first calls may be handed over). */
    async function warm(app = "direct"): Promise<void> {
      await waitFor(
        async () => {
          const before = (await callsByPath()).direct;
          for (let i = 0; i < 4; i++) assert.equal((await call("echo", {}, { app })).response.status, 200);
          return (await callsByPath()).direct >= before + 4;
        },
        "calls to take the direct path",
        30_000,
      );
    }

    it("makes sync and stream calls on the replica's channel, with the function's output in the run's log", async () => {
      await warm();
      const before = await callsByPath();
      const workers = new Set<string>();
      const pids = new Set<number>();
      for (let i = 0; i < 8; i++) {
        const { response, worker } = await call("echo", { text: `t${i}` });
        assert.equal(response.status, 200, await response.clone().text());
        workers.add(worker);
        pids.add(((await response.json()) as { result: { pid: number } }).result.pid);
      }
      assert.deepEqual([...workers].sort(), ["1", "2"], "both workers took calls");
      assert.equal(pids.size, 1, "one replica (max_replicas = 1) served both workers");
      const stream = await call("ticks", {}, { accept: "text/event-stream" });
      assert.equal(stream.response.status, 200);
      const ticks = (await stream.response.text()).split("\n\n").filter((block) => block.includes("data:"));
      assert.equal(ticks.length, 5, "every yielded item, one event each");
      const talked = await call("talk", { lines: 3 });
      assert.equal(talked.response.status, 200);
      const runId = ((await talked.response.json()) as { run_id: string }).run_id;
      const after = await callsByPath();
      assert.equal(after.direct - before.direct, 10, `every call went directly: ${JSON.stringify({ before, after })}`);
      assert.equal(after.handed_over, before.handed_over, "none was handed over");
      await waitFor(
        async () => {
          const response = await checkedFetch(
            `${server.url}/v4/projects/${PROJECT}/apps/direct/runs/${runId}/logs`,
            { headers: { Authorization: `Bearer ${server.token}` } },
          );
          const log = (await response.json()) as { lines: Array<{ stream: string; text: string }> };
          const lines = log.lines.map((line) => `${line.stream}: ${line.text}`);
          return lines.includes("stdout: line 2 of a direct call") && lines.includes("stderr: to stderr");
        },
        "the direct call's output in its run's log",
        15_000,
      );
    });

    it("fails a direct call whose replica crashes or overruns its time as one process does; the next is served", async () => {
      await warm();
      const crashed = await call("crash", {});
      assert.equal(crashed.response.status, 502, await crashed.response.clone().text());
      assert.match(((await crashed.response.json()) as Problem).type ?? "", /worker-crashed$/);
      await warm();
      const slow = await call("slow", { seconds: 30 });
      assert.equal(slow.response.status, 504, await slow.response.clone().text());
      assert.match(((await slow.response.json()) as Problem).type ?? "", /timeout$/);
      await warm();
    });

    it("fails a direct call whose replica passes its memory limit as out of memory, naming the limit", async (t) => {
      if (!(await cgroupsWork("the direct call past its memory limit"))) return t.skip("cgroups do not work here");
      await warm("hungry");
      const hog = await call("hog", { mib: 1024 }, { app: "hungry" });
      const problem = (await hog.response.json()) as Problem;
      // The worker learns from the supervisor how the replica ended: as one process says it.
      assert.equal(hog.response.status, 502, JSON.stringify(problem));
      assert.match(problem.type ?? "", /out-of-memory$/);
      assert.match(problem.detail ?? "", /exceeded its memory limit of 256 MiB/);
      await warm("hungry");
    });

    it("ends a replica that writes junk on its channels, the calls it had failing with a protocol violation", async () => {
      await warm();
      const junk = await call("junk", {});
      assert.equal(junk.response.status, 502, await junk.response.clone().text());
      const problem = (await junk.response.json()) as Problem;
      // A protocol violation is the replica's fault, told as a bad gateway (as on one process).
      assert.match(problem.type ?? "", /bad-gateway$/);
      assert.match(problem.detail ?? "", /broke the worker protocol/);
      // The host goes on: a new replica serves both workers, directly.
      await warm();
      assert.equal(server.child.exitCode, null, "the supervisor lives");
    });

    it("hands a custom runtime's calls to the supervisor, which proxies them as before", async () => {
      const before = await callsByPath();
      for (let i = 0; i < 4; i++) {
        const { response } = await call("anything", {}, { app: "http" });
        assert.equal(response.status, 200, await response.clone().text());
        assert.equal(typeof ((await response.json()) as { result: { pid: number } }).result.pid, "number");
      }
      const after = await callsByPath();
      assert.equal(after.handed_over - before.handed_over, 4, JSON.stringify({ before, after }));
      assert.equal(after.direct, before.direct);
    });

    it("hands a worker started in a dead one's place a channel of the replica already up", async () => {
      await warm();
      const replicaPid = ((await (await call("echo", {})).response.json()) as { result: { pid: number } }).result.pid;
      const before = await workerPids();
      assert.equal(before.length, 2, `two workers: ${before}`);
      process.kill(before[0], "SIGKILL");
      await waitFor(
        async () => {
          const now = await workerPids();
          return now.length === 2 && !now.includes(before[0]);
        },
        "a new worker to take its place",
        20_000,
      );
      // Through connections that reach each worker, every call goes directly, on the same replica.
      const start = await callsByPath();
      let total = 0;
      const workers = new Set<string>();
      await waitFor(
        async () => {
          const { response, worker } = await call("echo", {});
          assert.equal(response.status, 200);
          assert.equal(((await response.json()) as { result: { pid: number } }).result.pid, replicaPid);
          workers.add(worker);
          total++;
          return workers.size === 2;
        },
        "calls to reach both workers",
        20_000,
      );
      const end = await callsByPath();
      assert.equal(end.direct - start.direct, total, `each went directly: ${JSON.stringify({ start, end, total })}`);
    });
  });
}
