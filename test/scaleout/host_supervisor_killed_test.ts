/**
 * A host with workers (`RUNPLANE_WORKERS`) whose supervisor is killed (`kill -9`) while calls run: each
 * worker answers its calls in flight as a server that stops during a call does (409 `interrupted`, the
 * run recorded `failure`/`interrupted`), whether the call went straight to a replica's channel or was
 * handed to the supervisor, then exits.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Agent } from "undici";
import { openStore } from "../../server/store/mod.ts";
import { alive, waitFor } from "../_helpers/apps.ts";
import { callThrough } from "../_helpers/host_calls.ts";
import { nodeChildren } from "../_helpers/process_tree.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";

const PYTHON_APP = `import time

def slow(marker=None):
    if marker:
        open(marker, "w").close()
        time.sleep(3)
    return "slept"
`;

/** A custom runtime (its calls are handed to the supervisor) whose `POST /slow` takes 3 s. */
const CUSTOM_SERVER = `import http.server, json, os, sys, time

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if body.get("marker"):
            open(body["marker"], "w").close()
            time.sleep(3)
        answer = b'"slept"'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

describe("a host whose supervisor is killed", { timeout: 180_000 }, () => {
  it("ends the calls its workers had in flight interrupted (409, recorded so), direct or handed over", async () => {
    const dirs = await makeServerDirs("runplane-supervisor-killed-");
    await dirs.deploy("work", { "runplane.toml": "", "main.py": PYTHON_APP });
    await dirs.deploy("web", {
      "runplane.toml": '[deployment]\nruntime = "custom"\n\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n',
      "server.py": CUSTOM_SERVER,
    });
    const server = await startServerProcess({ ...dirs.env, RUNPLANE_WORKERS: "2", RUNPLANE_SANDBOX: "off" });
    // The answers' connections are not kept: how long a stopping worker waits on a client's kept-alive
    // connection is not what this test is about.
    const once = new Agent({ pipelining: 0 });
    try {
      // Warm replicas: the calls below run at once, the Python one on a replica's channel where a slot is free.
      for (const app of ["work", "web"]) {
        const { response } = await callThrough(server, `/v4/${PROCESS_PROJECT}/${app}/slow`, {}, { via: once });
        assert.equal(response.status, 200, await response.clone().text());
      }
      const workers = await nodeChildren(server.child.pid!);
      const markers = ["work", "web"].map((app) => join(dirs.root, `${app}.started`));
      const calls = ["work", "web"].map((app, i) =>
        callThrough(server, `/v4/${PROCESS_PROJECT}/${app}/slow`, { marker: markers[i] }, { via: once })
      );
      await waitFor(() => markers.every(existsSync), "both functions to start", 30_000);
      await server.kill();

      const runIds: string[] = [];
      for (const [i, call] of calls.entries()) {
        const { response } = await call;
        const problem = (await response.json()) as { type?: string; run_id?: string };
        assert.equal(response.status, 409, `call ${i}: ${JSON.stringify(problem)}`);
        assert.match(String(problem.type), /\/interrupted$/);
        assert.ok(problem.run_id);
        runIds.push(problem.run_id);
      }
      await waitFor(() => workers.every((pid) => !alive(pid)), "the workers to exit", 60_000);
      const store = await openStore(dirs.dataDir);
      try {
        const rows = await store.db.selectFrom("runs").select(["run_id", "status", "error_type"])
          .where("run_id", "in", runIds).execute();
        assert.deepEqual(
          rows.map((row) => [row.status, row.error_type]),
          [["failure", "interrupted"], ["failure", "interrupted"]],
        );
      } finally {
        await store.close();
      }
    } finally {
      if (server.child.exitCode === null && server.child.signalCode === null) await server.kill();
      await once.close();
      await dirs.remove();
    }
  });
});
