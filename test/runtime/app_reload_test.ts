import assert from "node:assert/strict";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { alive, callFunction, deployApp, hostPid, replicaPid, waitFor } from "../_helpers/apps.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = (version: number) => `
import os, time

def version():
    return {"version": ${version}, "pid": os.getpid()}

def slow(seconds):
    time.sleep(seconds)
    return {"version": ${version}}
`;

describe("app discovery and reload", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  it("answers 503 naming the bad key of a broken runplane.toml, and logs it", async () => {
    await deployApp(t, "broken", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurency = 4\n",
      files: { "main.py": MAIN(1) },
    });
    const { error, response } = await callFunction(t, "broken", "version");
    assert.equal(response.status, 503);
    assert.equal(error?.type, "https://runplane.dev/problems/app-unavailable");
    assert.match(error?.detail ?? "", /scaling\.replica_concurency/);
    assert.ok(
      t.logs.some((l) => l.msg === "app failed to load" && String(l.error).includes("scaling.replica_concurency")),
    );
  });

  it("answers 503 for an out-of-range value", async () => {
    await deployApp(t, "too-long", {
      toml: "[scaling]\nresponse_grace_period = 50000\n",
      files: { "main.py": MAIN(1) },
    });
    const { error, response } = await callFunction(t, "too-long", "version");
    assert.equal(response.status, 503);
    assert.match(error?.detail ?? "", /scaling\.response_grace_period/);
  });

  it("answers 503 naming the key of a bad [hardware] value", async () => {
    await deployApp(t, "bad-hardware", { toml: "[hardware]\nmemory = -2\n", files: { "main.py": MAIN(1) } });
    const { error, response } = await callFunction(t, "bad-hardware", "version");
    assert.equal(response.status, 503);
    assert.equal(error?.type, "https://runplane.dev/problems/app-unavailable");
    assert.match(error?.detail ?? "", /hardware\.memory must be a number of GiB/);
  });

  it("answers 503 when main.py fails to import", async () => {
    await deployApp(t, "bad-import", { toml: "", files: { "main.py": "import no_such_module_here\n" } });
    const { error, response } = await callFunction(t, "bad-import", "version");
    assert.equal(response.status, 503);
    assert.match(error?.detail ?? "", /ModuleNotFoundError: No module named 'no_such_module_here'/);
  });

  it("answers 404 for an app that does not exist", async () => {
    const { response } = await callFunction(t, "nowhere", "version");
    assert.equal(response.status, 404);
  });

  it("serves an app added after start, without an explicit reload", async () => {
    const dir = join(t.server.context.config.appsDir, TEST_PROJECT, "late");
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "main.py"), MAIN(7));
    await writeFile(join(dir, "runplane.toml"), "");
    const { data } = await callFunction(t, "late", "version");
    assert.equal((data?.result as { version: number }).version, 7);
  });

  it("reloads a changed app: new calls go to new replicas, the old replica finishes its call and stops", async () => {
    const dir = await deployApp(t, "live", { toml: "[scaling]\ncooldown = 60\n", files: { "main.py": MAIN(1) } });
    const old = (await callFunction(t, "live", "version")).data?.result as { pid: number };
    // The old worker's pid on the host (it reports its sandbox's), and the replica the server started.
    const oldPid = hostPid(dir, old.pid);
    const oldReplica = replicaPid(oldPid);
    const inFlight = callFunction(t, "live", "slow", { seconds: 1.5 });
    await waitFor(() => t.server.context.runtime.capacity(TEST_PROJECT, "live").busy === 1, "the slow call to start");
    await writeFile(join(dir, "main.py"), MAIN(2));
    await writeFile(join(dir, "runplane.toml"), "[scaling]\ncooldown = 60\n# edited\n");
    // The folder is polled; wait for the new version to answer.
    await waitFor(
      async () => ((await callFunction(t, "live", "version")).data?.result as { version: number }).version === 2,
      "version 2",
    );
    assert.equal(
      ((await inFlight).data?.result as { version: number }).version,
      1,
      "the old replica finished its call",
    );
    await waitFor(() => !alive(oldPid) && !alive(oldReplica), "the old replica to stop once drained");
  });

  it("answers 404 once an app folder is removed", async () => {
    await deployApp(t, "gone", { toml: "", files: { "main.py": MAIN(1) } });
    assert.equal((await callFunction(t, "gone", "version")).response.status, 200);
    await rm(join(t.server.context.config.appsDir, TEST_PROJECT, "gone"), { recursive: true });
    await waitFor(
      async () => (await callFunction(t, "gone", "version")).response.status === 404,
      "a 404 for the removed app",
    );
  });
});
