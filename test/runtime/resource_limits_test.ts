/**
 * Each replica's `[hardware]` and the pids limit, enforced by a cgroup of its own: real processes that
 * allocate past their memory, burn CPU and fork without end, jailed and (memory) unjailed.
 */
import assert from "node:assert/strict";
import { readdirSync, readlinkSync, renameSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { alive, callFunction, deployApp, hostPid, waitFor } from "../_helpers/apps.ts";
import { cgroupsWork } from "../_helpers/cgroups.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { getRun } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const HUNGRY = `
import os

def pid():
    return os.getpid()

def hog(mib):
    # Filled, not just reserved: the pages count.
    chunks = []
    for _ in range(mib // 16):
        chunks.append(os.urandom(1) * (16 << 20))
    return len(chunks)
`;

/** A custom runtime's own server that allocates what a POST asks for. */
const HUNGRY_SERVER = `
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def answer(self, data=b"", kind="application/json"):
        self.send_response(200)
        for name, value in (("Content-Type", kind), ("Content-Length", str(len(data)))):
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        chunks = [os.urandom(1) * (16 << 20) for _ in range(body.get("mib", 0) // 16)]
        self.answer(json.dumps({"chunks": len(chunks), "pid": os.getpid()}).encode())

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
`;

const BUSY = `
import os, time

def burn(cpu_each, processes):
    # Several busy processes, each until it used cpu_each seconds of CPU (at most 30 s): unlimited on an
    # idle host they would use more than a core between them; a busy host only makes them take longer.
    started = time.monotonic()
    children = []
    for _ in range(processes):
        child = os.fork()
        if child == 0:
            while time.process_time() < cpu_each and time.monotonic() - started < 30:
                pass
            os._exit(0)
        children.append(child)
    for child in children:
        os.waitpid(child, 0)
    wall = time.monotonic() - started
    times = os.times()
    return {"cpu": times.children_user + times.children_system, "wall": wall}
`;

const FORKER = `
import os, time

def fork_many(n):
    children, error = [], None
    try:
        for _ in range(n):
            child = os.fork()
            if child == 0:
                time.sleep(5)
                os._exit(0)
            children.append(child)
    except OSError as e:
        error = f"{type(e).__name__}: {e}"
    for child in children:
        os.kill(child, 9)
        os.waitpid(child, 0)
    return {"started": len(children), "error": error}

def ok():
    return "ok"

def fill_tmp(mib):
    written = 0
    try:
        with open("/tmp/fill", "wb") as f:
            for _ in range(mib):
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1
    except OSError as e:
        return {"written": written, "error": e.strerror}
    finally:
        os.remove("/tmp/fill")
    return {"written": written, "error": None}

def threads():
    names = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"]
    return {name: os.environ.get(name) for name in names}
`;

const TOML = (hardware: string) =>
  `[scaling]\nmax_replicas = 1\nresponse_grace_period = 120\n[hardware]\n${hardware}\n`;

type Problem = { type: string; status: number; detail?: string; run_id?: string };

if (await cgroupsWork("the resource limit tests")) {
  for (const sandbox of ["auto", "off"] as const) {
    describe(`a replica past its memory limit (RUNPLANE_SANDBOX=${sandbox})`, () => {
      let t: TestServer;
      let hungryDir: string;
      let bystanderDir: string;
      before(async () => {
        t = await startTestServer({ env: { RUNPLANE_SANDBOX: sandbox } });
        hungryDir = await deployApp(t, "hungry", { toml: TOML("memory = 0.25"), files: { "main.py": HUNGRY } });
        bystanderDir = await deployApp(t, "bystander", { toml: TOML("memory = 0.25"), files: { "main.py": HUNGRY } });
      });
      after(() => t.close());

      it("fails the call with 502 out-of-memory naming the limit, records it, and a new replica serves the next call", async () => {
        const first = await callFunction(t, "hungry", "pid");
        assert.equal(first.response.status, 200);
        const worker = hostPid(hungryDir, first.data!.result as number);
        const bystander = hostPid(bystanderDir, (await callFunction(t, "bystander", "pid")).data!.result as number);

        // Well within the limit: served.
        const small = await callFunction(t, "hungry", "hog", { mib: 64 });
        assert.equal(small.response.status, 200, JSON.stringify(small.error));

        const { response, error } = await callFunction(t, "hungry", "hog", { mib: 1024 });
        const problem = error as Problem;
        assert.equal(response.status, 502, JSON.stringify(problem));
        assert.equal(problem.type, "https://runplane.dev/problems/out-of-memory");
        assert.match(problem.detail ?? "", /exceeded its memory limit of 256 MiB/);
        assert.ok(problem.run_id);

        const run = await getRun({ client: t.client, project: TEST_PROJECT, app: "hungry" }, problem.run_id!);
        assert.equal(run.data?.status, "failure");
        assert.equal(run.data?.error?.type, "out-of-memory");
        assert.match(run.data?.error?.message ?? "", /memory limit of 256 MiB/);

        await waitFor(() => !alive(worker), "the killed worker to be gone");
        const next = await callFunction(t, "hungry", "pid");
        assert.equal(next.response.status, 200);
        assert.notEqual(hostPid(hungryDir, next.data!.result as number), worker, "a new replica served it");

        // The other app's replica never noticed.
        assert.ok(alive(bystander));
        const other = await callFunction(t, "bystander", "pid");
        assert.equal(hostPid(bystanderDir, other.data!.result as number), bystander);
        assert.ok(
          t.logs.some((l) => l.msg === "replica killed at its memory limit" && l.app === `${TEST_PROJECT}/hungry`),
        );
      });

      it("says the same of a custom runtime's server killed at its limit during a call", async () => {
        await deployApp(t, "hungry-server", {
          toml: '[deployment]\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["python3", "server.py"]\n'
            + "[scaling]\nmax_replicas = 1\n[hardware]\nmemory = 0.25\n",
          files: { "server.py": HUNGRY_SERVER },
        });
        const small = await callFunction(t, "hungry-server", "hog", { mib: 32 });
        assert.equal(small.response.status, 200, JSON.stringify(small.error));
        const { response, error } = await callFunction(t, "hungry-server", "hog", { mib: 1024 });
        const problem = error as Problem;
        assert.equal(response.status, 502, JSON.stringify(problem));
        assert.equal(problem.type, "https://runplane.dev/problems/out-of-memory");
        assert.match(problem.detail ?? "", /exceeded its memory limit of 256 MiB/);
        await waitFor(
          async () => (await callFunction(t, "hungry-server", "hog", { mib: 16 })).response.status === 200,
          "a new replica to serve",
        );
      });
    });
  }

  describe("a replica's CPU quota and pids limit", () => {
    let t: TestServer;
    before(async () => {
      t = await startTestServer({ env: { RUNPLANE_REPLICA_PIDS: "64" } });
      await deployApp(t, "busy", { toml: TOML("cpu = 0.5"), files: { "main.py": BUSY } });
      await deployApp(t, "forker", { toml: TOML("cpu = 1.5\nmemory = 0.5"), files: { "main.py": FORKER } });
    });
    after(() => t.close());

    it("holds three busy processes to about half a core between them", async () => {
      const { response, data, error } = await callFunction(t, "busy", "burn", { cpu_each: 0.4, processes: 3 });
      assert.equal(response.status, 200, JSON.stringify(error));
      const { cpu, wall } = data!.result as { cpu: number; wall: number };
      // The quota is 0.5; unlimited, three processes take more than a whole core on two.
      assert.ok(cpu / wall < 0.8, `the replica used ${cpu.toFixed(2)} s of CPU in ${wall.toFixed(2)} s`);
      // It did its work (1.2 s of CPU) however long a loaded host made that take.
      assert.ok(cpu > 1, `the replica ran ${cpu.toFixed(2)} s of CPU of its 1.2`);
    });

    it("stops a fork bomb at the pids limit; the server and the replica go on", async () => {
      const { response, data, error } = await callFunction(t, "forker", "fork_many", { n: 300 });
      assert.equal(response.status, 200, JSON.stringify(error));
      const { started, error: forkError } = data!.result as { started: number; error: string | null };
      assert.ok(started < 64, `${started} processes were started past a limit of 64`);
      assert.match(forkError ?? "", /Resource temporarily unavailable|BlockingIOError/);
      const health = await checkedFetch(`${t.url}/healthz`);
      assert.equal(health.status, 200);
      assert.equal((await callFunction(t, "forker", "ok")).data?.result, "ok");
    });

    it("bounds the jail's /tmp to a quarter of the memory, and sizes thread pools by cpu", async () => {
      const { data, error } = await callFunction(t, "forker", "fill_tmp", { mib: 300 });
      const { written, error: writeError } = data!.result as { written: number; error: string | null };
      if (
        (await checkedFetch(`${t.url}/readyz`).then((r) => r.json()) as { sandbox: { jailed: boolean } }).sandbox.jailed
      ) {
        // 512 MiB / 4: 128 MiB of /tmp.
        assert.match(String(writeError), /No space left on device/, JSON.stringify(error));
        assert.ok(written <= 128, `${written} MiB were written to /tmp`);
      }
      assert.deepEqual((await callFunction(t, "forker", "threads")).data?.result, {
        OMP_NUM_THREADS: "2",
        MKL_NUM_THREADS: "2",
        OPENBLAS_NUM_THREADS: "2",
        NUMEXPR_NUM_THREADS: "2",
      });
    });

    it("answers 503 naming the cgroup when a replica's cannot be made, and starts none unlimited", async () => {
      // This server's folders gone from under it (an operator's cleanup, a broken delegation).
      const namespace = /\[(\d+)\]/.exec(readlinkSync("/proc/self/ns/pid"))![1];
      // (This test file's servers run one at a time: this one's are the only folders of this process but
      // for a probe of `cgroupsWork` that another file's import may be making.)
      const mine = t.server.context.cgroups.parents.flatMap((parent) =>
        readdirSync(parent).filter((name) =>
          name.startsWith(`${namespace}-${process.pid}-`) && !name.endsWith("-rp_testprobe")
        ).map((name) => join(parent, name))
      );
      assert.equal(mine.length, t.server.context.cgroups.parents.length, "this server's own folders");
      const hidden = mine.map((dir) => `${dir}-hidden`);
      mine.forEach((dir, i) => renameSync(dir, hidden[i]));
      try {
        await deployApp(t, "unlimited", { toml: TOML("cpu = 0.5"), files: { "main.py": FORKER } });
        const { response, error } = await callFunction(t, "unlimited", "ok");
        assert.equal(response.status, 503);
        assert.match(
          (error as Problem).detail ?? "",
          /its replica's cgroup \(its memory and CPU limits\) could not be made/,
        );
        assert.ok(!t.logs.some((l) => l.msg === "replica starting" && l.app === `${TEST_PROJECT}/unlimited` && l.pid));
      } finally {
        hidden.forEach((dir, i) => renameSync(dir, mine[i]));
      }
      assert.equal((await callFunction(t, "unlimited", "ok")).data?.result, "ok");
    });

    it("says in /readyz which cgroup version limits the replicas", async () => {
      const response = await checkedFetch(`${t.url}/readyz`);
      const body = (await response.json()) as { cgroups: { setting: string; version: string | null; warnings: [] } };
      assert.equal(response.status, 200);
      assert.equal(body.cgroups.setting, "auto");
      assert.match(String(body.cgroups.version), /^v[12]$/);
      assert.deepEqual(body.cgroups.warnings, []);
      assert.ok(
        t.logs.some((l) =>
          String(l.msg).startsWith(`cgroups: each replica is limited by a cgroup ${body.cgroups.version}`)
        ),
      );
    });
  });
}

describe("RUNPLANE_CGROUPS=off", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_CGROUPS: "off" } });
  });
  after(() => t.close());

  it("is said loudly at start and in /readyz", async () => {
    // Right after the start /readyz may still say 503 (the apps loading), a problem without the report.
    let response!: Response;
    await waitFor(
      async () => (response = await checkedFetch(`${t.url}/readyz`)).status === 200,
      "the server to be ready",
    );
    const body = (await response.json()) as {
      cgroups: { setting: string; version: string | null; warnings: string[] };
    };
    assert.equal(body.cgroups.setting, "off");
    assert.equal(body.cgroups.version, null);
    assert.match(body.cgroups.warnings.join(" "), /without memory, CPU and process limits/);
    assert.ok(t.logs.some((l) => l.level === 40 && String(l.msg).startsWith("CGROUPS: RUNPLANE_CGROUPS=off")));
  });
});
