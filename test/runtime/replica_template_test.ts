import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp, waitFor } from "../_helpers/apps.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";

/** An app whose import burns ~0.6 s of CPU, and that says which process imported it. */
const EXPENSIVE = `
import os, random, time

IMPORT_PID = os.getpid()
_end = time.process_time() + 0.6
while time.process_time() < _end:
    pass

def whoami(pause=0):
    time.sleep(pause)
    return {"pid": os.getpid(), "ppid": os.getppid(), "import_pid": IMPORT_PID, "random": random.random()}
`;

/** Starts a thread at import: forking it would copy a thread's state (Python 3.12 warns of it). */
const THREADED = `
import threading, time
threading.Thread(target=time.sleep, args=(3600,), daemon=True, name="poller").start()
${EXPENSIVE}`;

/** A stand-in for torch that says CUDA was initialised at import, preloaded through [runtime] preload. */
const FAKE_TORCH = `
class cuda:
    @staticmethod
    def is_initialized():
        return True
`;

interface Whoami {
  pid: number;
  ppid: number;
  import_pid: number;
  random: number;
}

async function whoami(t: TestServer, app: string, pause = 0): Promise<{ result: Whoami; ms: number }> {
  const started = performance.now();
  const { response, data, error } = await callFunction(t, app, "whoami", { pause });
  assert.equal(response.status, 200, JSON.stringify(error));
  return { result: data!.result as Whoami, ms: performance.now() - started - pause * 1000 };
}

describe("replicas forked from an app's template", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    await deployApp(t, "expensive", {
      toml: "[scaling]\nmax_replicas = 2\ncooldown = 60\n",
      files: { "main.py": EXPENSIVE },
    });
    await deployApp(t, "threaded", { toml: "[scaling]\nmax_replicas = 2\n", files: { "main.py": THREADED } });
    await deployApp(t, "cuda", {
      toml: '[scaling]\nmax_replicas = 2\n\n[runtime]\npreload = ["torch"]\n',
      files: { "main.py": EXPENSIVE, "torch.py": FAKE_TORCH },
    });
  });
  after(() => t?.close());

  it("serves a second replica, needed while the first is busy, from a fork of the template that imported the app", async (context) => {
    const first = whoami(t, "expensive", 2);
    // The first call holds the only slot of the first replica: this one needs a second replica.
    const states = () => t.server.context.runtime.replicaStates().find((s) => s.app === `${TEST_PROJECT}/expensive`);
    await waitFor(() => states()?.busy === 1, "the first replica to be ready and busy", 30_000);
    const second = await whoami(t, "expensive");
    const busy = await first;
    for (const { result } of [busy, second]) {
      assert.notEqual(result.pid, result.import_pid, "the replica did not import the app itself");
      assert.equal(result.ppid, result.import_pid, "its parent is the process that imported the app: the template");
    }
    assert.notEqual(second.result.pid, busy.result.pid, "two replicas");
    assert.equal(second.result.import_pid, busy.result.import_pid, "one template");
    assert.notEqual(second.result.random, busy.result.random, "each forked replica has its own random seed");
    // Not a bound (the machine is shared): what the report quotes.
    context.diagnostic(`first call (template import + fork): ${busy.ms.toFixed(0)} ms`);
    context.diagnostic(`second replica (fork): ${second.ms.toFixed(0)} ms`);
  });

  it("cold-starts, and says why once naming the app, when the app starts a thread at import", async () => {
    const { result } = await whoami(t, "threaded");
    assert.equal(result.pid, result.import_pid, "the replica imported the app itself");
    const warned = t.logs.filter((line) => String(line.msg).includes("forking this app's template would be unsafe"));
    assert.equal(warned.length, 1, JSON.stringify(warned));
    assert.equal(warned[0].app, `${TEST_PROJECT}/threaded`);
    assert.match(String(warned[0].reason), /thread/);
  });

  it("cold-starts when a preloaded module initialised CUDA at import (a torch stand-in)", async () => {
    const { result } = await whoami(t, "cuda");
    assert.equal(result.pid, result.import_pid, "the replica imported the app itself");
    const warned = t.logs.filter((line) =>
      line.app === `${TEST_PROJECT}/cuda` && String(line.msg).includes("would be unsafe")
    );
    assert.equal(warned.length, 1);
    assert.match(String(warned[0].reason), /CUDA/);
  });
});

describe("RUNPLANE_FORK_REPLICAS=false", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_FORK_REPLICAS: "false" } });
    await deployApp(t, "expensive", { toml: "", files: { "main.py": EXPENSIVE } });
  });
  after(() => t?.close());

  it("cold-starts every replica", async () => {
    const { result } = await whoami(t, "expensive");
    assert.equal(result.pid, result.import_pid);
  });
});

/** Live processes (zombies left out) whose environment holds `marker`. */
async function markedProcesses(marker: string): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const environ = await readFile(`/proc/${entry}/environ`, "latin1").catch(() => "");
    const stat = await readFile(`/proc/${entry}/stat`, "utf8").catch(() => "");
    const zombie = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) === "Z";
    if (environ.includes(marker) && !zombie) found.push(Number(entry));
  }
  return found;
}

describe("a server killed with SIGKILL", () => {
  it("leaves no template and no forked replica behind", async () => {
    const dirs = await makeServerDirs("runplane-template-");
    const marker = `FORK_MARKER_${randomBytes(6).toString("hex")}`;
    await dirs.deploy("kept", {
      "runplane.toml": `[scaling]\nmin_replicas = 1\n\n[env]\nTEMPLATE_TEST = "${marker}"\n`,
      "main.py": EXPENSIVE,
    });
    const server = await startServerProcess(dirs.env);
    try {
      const { response, data } = await server.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
        params: { path: { project_id: PROCESS_PROJECT, app_name: "kept", function_name: "whoami" } },
        body: {},
      });
      assert.equal(response.status, 200);
      const result = (data as { result: unknown }).result as Whoami;
      assert.notEqual(result.pid, result.import_pid, "a forked replica answered");
      assert.ok((await markedProcesses(marker)).length >= 2, "the template and its replica run");
      await server.kill();
      await waitFor(async () => (await markedProcesses(marker)).length === 0, "no template or replica left", 10_000);
    } finally {
      await server.kill();
      await dirs.remove();
    }
  });
});

describe("a template whose socket cannot be made", () => {
  it("is a cold start, not a crash: a server whose TMPDIR is too long for a Unix socket still answers", async () => {
    const dirs = await makeServerDirs("runplane-template-");
    // 100 bytes of folders: no socket path under it fits a Unix socket's 108 bytes.
    const longTmp = join(dirs.root, "t".repeat(50), "u".repeat(50));
    await mkdir(longTmp, { recursive: true });
    await dirs.deploy("long", { "runplane.toml": `[scaling]\nmin_replicas = 1\n`, "main.py": EXPENSIVE });
    const server = await startServerProcess({ ...dirs.env, TMPDIR: longTmp, RUNPLANE_SANDBOX: "off" });
    try {
      const { response } = await server.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
        params: { path: { project_id: PROCESS_PROJECT, app_name: "long", function_name: "whoami" } },
        body: {},
      });
      assert.equal(response.status, 200);
      assert.equal(server.child.exitCode, null, `the server is alive: ${server.stderr().slice(-2000)}`);
      assert.ok(
        server.logs.some((line) => /shorter TMPDIR/.test(JSON.stringify(line))),
        "the log says why the template could not start",
      );
    } finally {
      await server.kill();
      await dirs.remove();
    }
  });
});
