/**
 * A replica of a deployment this host has not built yet (a host of a cluster, issue 31) awaits its
 * `prepare` before its process starts: the process starts in the folder prepare made, a failed prepare is
 * the replica's failure to start, and a replica stopped while it prepares never starts a process.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { ProblemError } from "../../server/problems/mod.ts";
import { CustomProcessReplica } from "../../server/runtime/_custom_replica.ts";
import { PythonReplica } from "../../server/runtime/_python_replica.ts";
import { unjailedSandbox } from "../../server/sandbox/mod.ts";

const silent = createLogger({ level: "silent", destination: new Writable({ write: (_c, _e, done) => done() }) });

describe("a replica's prepare runs before its process starts", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "runplane-prepare-"));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  function python(appDir: string, prepare: () => Promise<void>): PythonReplica {
    return new PythonReplica({
      appDir,
      label: "p-x/app",
      python: "python3",
      concurrency: 1,
      logger: silent,
      sandbox: unjailedSandbox(),
      jail: { projectId: "p-x", cwd: appDir, egress: false, env: {} },
      prepare,
    });
  }

  it("starts the Python worker in the folder prepare made, only once it has", async () => {
    const appDir = join(dir, "made");
    let prepared = false;
    const replica = python(appDir, async () => {
      await sleep(300);
      await mkdir(appDir);
      await writeFile(join(appDir, "main.py"), "def run():\n    return 1\n");
      prepared = true;
    });
    try {
      assert.equal(replica.pid, undefined, "no process while it prepares");
      await replica.ready;
      assert.ok(prepared);
      assert.ok(replica.pid! > 0);
    } finally {
      await replica.stop();
    }
  });

  it("fails to start, with prepare's reason, when prepare fails", async () => {
    const replica = python(dir, () => Promise.reject(new Error("the deployment cannot be built on this host: no")));
    await assert.rejects(replica.ready, (error: unknown) => {
      assert.ok(error instanceof ProblemError);
      assert.equal(error.kind, "app-unavailable");
      assert.match(error.message, /cannot be built on this host: no/);
      return true;
    });
    await replica.exited;
    assert.equal(replica.usable, false);
    assert.equal(replica.pid, undefined);
  });

  it("never starts a process when stopped while it prepares", async () => {
    let finish!: () => void;
    const replica = python(dir, () => new Promise((resolve) => (finish = resolve)));
    const stopped = replica.stop();
    finish();
    await stopped;
    await assert.rejects(replica.ready);
    assert.equal(replica.pid, undefined);
  });

  it("fails a custom runtime's start with prepare's reason, and it is gone at once", async () => {
    const replica = new CustomProcessReplica({
      appDir: dir,
      label: "p-x/custom",
      entrypoint: ["python3", "-m", "http.server"],
      logger: silent,
      sandbox: unjailedSandbox(),
      jail: { projectId: "p-x", cwd: dir, egress: false, env: {} },
      prepare: () => Promise.reject(new Error("the deployment cannot be built on this host: no")),
    });
    await assert.rejects(replica.ready, /p-x\/custom: the deployment cannot be built on this host: no/);
    await replica.exited;
    assert.equal(replica.pid, undefined);
  });
});
