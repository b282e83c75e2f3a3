/**
 * A host of a cluster builds a deployment only when it is to run one of its replicas (issue 31): the
 * process that claimed the build has it, the host a replica is placed on builds it (virtualenv included)
 * when the replica starts, and a host whose calls are forwarded never builds it. And a new replica goes to
 * the least loaded host, not to the one the call came to when that one holds more seats.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SERVER_PID_PY } from "../_helpers/apps.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { type AppRef, callRun } from "../_helpers/runs.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
} from "../_helpers/server_process.ts";
import { writeWheel } from "../_helpers/wheels.ts";

const POSTGRES = (await engines()).includes("postgres");

// One replica in the cluster; a pip dependency, so a host that builds it makes the virtualenv too.
const TOML = `[deployment]\nname = "built"\n\n[scaling]\nmin_replicas = 0\nmax_replicas = 1\n`
  + `replica_concurrency = 4\ncooldown = 300\n\n[hardware]\ncpu = 0.25\n\n[dependencies.pip]\nrp_layer = "1.0"\n`;
const MAIN_PY = `import os, sys
import rp_layer

${SERVER_PID_PY}

def who():
    return {"server": _server_pid(), "python": sys.executable}
`;

describe("a host of a cluster builds a deployment only to run its replicas", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  const dirs: ServerDirs[] = [];
  const hosts: ServerProcess[] = [];
  let replicaHost: number | undefined;
  const on = (host: ServerProcess): AppRef => ({ client: host.client, project: PROCESS_PROJECT, app: "built" });

  before(async () => {
    database = await createTestDatabase();
    for (const name of ["a", "b", "c"]) dirs.push(await makeServerDirs(`runplane-builds-${name}-`));
    const wheels = join(dirs[0].root, "wheels");
    await mkdir(wheels);
    writeWheel(wheels, "rp_layer", "1.0");
    const env = { RUNPLANE_PIP_FIND_LINKS: wheels };
    hosts.push(await startClusterHost(dirs[0], { databaseUrl: database.url, env }));
    for (const i of [1, 2]) {
      hosts.push(await startClusterHost(dirs[i], { databaseUrl: database.url, token: hosts[0].token, env }));
    }
  });
  after(async () => {
    await Promise.all(hosts.map((host) => host.kill()));
    await database?.drop();
    await Promise.all(dirs.map((d) => d.remove()));
  });

  it("builds on the claiming host and the replica's host, never on a host that forwards", async () => {
    const deployment = await deployBundle(
      hosts[0],
      "built",
      await bundleOf({ "runplane.toml": TOML, "main.py": MAIN_PY }),
      hosts[0].token,
      { project: PROCESS_PROJECT },
    );
    assert.equal(deployment.status, "ready", deployment.lines.join("\n"));
    const folder = (i: number) => join(dirs[i].env.RUNPLANE_DATA_DIR, "deployments", deployment.deployment_id);
    const builtOn = () => [0, 1, 2].filter((i) => existsSync(folder(i)));
    // Ready means served by the process that built it; nothing runs yet, so no other host has built it.
    const [builder] = builtOn();
    assert.deepEqual(builtOn(), [builder], "only the host that claimed the build has its folder");

    // The first call on a host with no replica anywhere places the replica there: it builds it first.
    const placed = [0, 1, 2].find((i) => i !== builder)!;
    const first = await callRun(on(hosts[placed]), "who");
    assert.equal(first.response.status, 200, JSON.stringify(first.error));
    const served = (first.data as { result: { server: number; python: string } }).result;
    assert.equal(served.server, hosts[placed].child.pid, "the replica runs on the host the call came to");
    assert.ok(served.python.startsWith(dirs[placed].env.RUNPLANE_DATA_DIR), served.python);
    assert.deepEqual(builtOn(), [builder, placed].sort(), "the replica's host built it");

    // The third host forwards to that replica (max_replicas = 1) and builds nothing.
    const other = [0, 1, 2].find((i) => i !== builder && i !== placed)!;
    for (let i = 0; i < 3; i++) {
      const forwarded = await callRun(on(hosts[other]), "who");
      assert.equal(forwarded.response.status, 200, JSON.stringify(forwarded.error));
      assert.equal((forwarded.data as { result: { server: number } }).result.server, hosts[placed].child.pid);
    }
    assert.ok(!existsSync(folder(other)), "a host that only forwards never builds the deployment");
    replicaHost = placed;
  });

  it("places a new replica on a less loaded host than the one the call came to", async () => {
    assert.ok(replicaHost !== undefined, "the test before placed a replica");
    const second = await deployBundle(
      hosts[0],
      "second",
      await bundleOf({ "runplane.toml": TOML.replace('name = "built"', 'name = "second"'), "main.py": MAIN_PY }),
      hosts[0].token,
      { project: PROCESS_PROJECT },
    );
    assert.equal(second.status, "ready", second.lines.join("\n"));
    // The replica's host holds a seat of "built"; the other two hold none, and both have room.
    const { data, response } = await callRun({ ...on(hosts[replicaHost]), app: "second" }, "who");
    assert.equal(response.status, 200, JSON.stringify(data));
    const server = (data as { result: { server: number } }).result.server;
    assert.notEqual(server, hosts[replicaHost].child.pid, "not placed on the host already holding a replica");
    assert.ok(hosts.some((host) => host.child.pid === server));
  });
});
