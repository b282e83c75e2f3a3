/**
 * Project volumes across the hosts of a cluster (issue 48, part 2): two hosts whose RUNPLANE_VOLUMES_DIR is
 * one shared folder (`directory` mode, as on a shared file system) see the same files, through the API and
 * in their jailed replicas; a third host whose volumes folder lacks the volume says so in `/readyz`. On
 * PostgreSQL, jailed; skips loudly without either.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { sandboxWorks } from "../_helpers/sandbox.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
} from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");

const MAIN = `import os

def exchange(mine, theirs):
    with open(os.path.join("/models", mine), "w") as f:
        f.write("written on " + os.environ.get("HOST_TAG", "?"))
    with open(os.path.join("/models", theirs)) as f:
        return f.read()
`;

type Readiness = {
  volumes: { mode: string; unavailable: Array<{ project_id: string; volume: string; apps: string[]; reason: string }> };
};

describe("two hosts sharing one volumes folder", async () => {
  const works = POSTGRES && (await sandboxWorks("volumes across hosts"));
  let database: TestDatabase;
  let shared: string;
  const dirs: ServerDirs[] = [];
  const hosts: ServerProcess[] = [];

  before(async () => {
    if (!works) return;
    database = await createTestDatabase();
    shared = await mkdtemp(join(tmpdir(), "runplane-shared-volumes-"));
    const env = { RUNPLANE_SANDBOX: "auto", RUNPLANE_VOLUMES_MODE: "directory", RUNPLANE_VOLUMES_DIR: shared };
    for (const name of ["a", "b"]) {
      const made = await makeServerDirs(`runplane-volume-host-${name}-`);
      dirs.push(made);
      hosts.push(
        await startClusterHost(made, { databaseUrl: database.url, token: hosts[0]?.token, env }),
      );
    }
  });
  after(async () => {
    for (const host of hosts) await host.kill();
    for (const made of dirs) await made.remove();
    if (shared) await rm(shared, { recursive: true, force: true });
    await database?.drop();
  });

  function api(host: ServerProcess, method: string, path: string, body?: BodyInit, type?: string) {
    return checkedFetch(`${host.url}/v3/projects/${PROCESS_PROJECT}/volumes${path}`, {
      method,
      headers: { Authorization: `Bearer ${hosts[0]!.token}`, ...(type ? { "Content-Type": type } : {}) },
      body,
    });
  }

  it("a file put through one host is read by a replica on the other, and its write is read back through the first", {
    skip: !works,
  }, async () => {
    const [a, b] = hosts as [ServerProcess, ServerProcess];
    assert.equal((await api(a, "PUT", "/weights", JSON.stringify({ size_gb: 0.25 }), "application/json")).status, 201);
    const put = await api(a, "PUT", "/weights/files/from-a.txt", "put through a", "application/octet-stream");
    assert.ok(put.status === 200 || put.status === 201, await put.clone().text());
    const deployed = await deployBundle(
      b,
      "exchange",
      await bundleOf({ "main.py": MAIN, "runplane.toml": '[volumes]\nweights = "/models"\n[env]\nHOST_TAG = "b"\n' }),
      hosts[0]!.token,
      { project: PROCESS_PROJECT },
    );
    assert.equal(deployed.status, "ready", deployed.error ?? "");
    const call = await fetch(`${b.url}/v4/${PROCESS_PROJECT}/exchange/exchange`, {
      method: "POST",
      headers: { Authorization: `Bearer ${hosts[0]!.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ mine: "from-replica.txt", theirs: "from-a.txt" }),
    });
    const text = await call.text();
    assert.equal(call.status, 200, text);
    assert.equal((JSON.parse(text) as { result: string }).result, "put through a");
    const back = await api(a, "GET", "/weights/files/from-replica.txt");
    assert.equal(back.status, 200);
    assert.equal(await back.text(), "written on b");
    for (const host of hosts) {
      const ready = await checkedFetch(`${host.url}/readyz`);
      assert.deepEqual(((await ready.json()) as Readiness).volumes.unavailable, []);
    }
  });

  it("a host whose volumes folder lacks the volume says so in /readyz, naming the app", { skip: !works }, async () => {
    const made = await makeServerDirs("runplane-volume-host-c-");
    dirs.push(made);
    const c = await startClusterHost(made, {
      databaseUrl: database.url,
      token: hosts[0]!.token,
      env: { RUNPLANE_SANDBOX: "auto", RUNPLANE_VOLUMES_MODE: "directory" },
    });
    hosts.push(c);
    let report: Readiness["volumes"] | undefined;
    await waitFor(
      async () => {
        const ready = await checkedFetch(`${c.url}/readyz`);
        // 503 while its apps load.
        if (ready.status !== 200) return false;
        report = ((await ready.json()) as Readiness).volumes;
        return report.unavailable.length > 0;
      },
      "host c to report the volume it cannot see",
      60_000,
    );
    assert.equal(report!.mode, "directory");
    assert.deepEqual(report!.unavailable.map((v) => [v.project_id, v.volume, v.apps]), [[PROCESS_PROJECT, "weights", [
      "exchange",
    ]]]);
    assert.match(report!.unavailable[0]!.reason, /not in this host's volumes folder/);
    assert.ok(c.logs.some((line) => String(line.msg).includes("mounts a volume this host cannot see")));
    // A call through it runs where the volume is: no replica of the app is placed on it.
    const call = await fetch(`${c.url}/v4/${PROCESS_PROJECT}/exchange/exchange`, {
      method: "POST",
      headers: { Authorization: `Bearer ${hosts[0]!.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ mine: "through-c.txt", theirs: "from-a.txt" }),
    });
    const text = await call.text();
    assert.equal(call.status, 200, text);
    assert.equal((JSON.parse(text) as { result: string }).result, "put through a");
  });
});
