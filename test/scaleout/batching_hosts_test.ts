/**
 * Batches are formed where the replica is (issue 49): calls of a batched function that reach one
 * replica through a host's two workers, and through another host of a cluster, join one batch. The
 * batch leaves only when it is full (wait_ms is long), so a full batch is proof that calls from every
 * front door met in front of the replica.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { SERVER_PID_PY } from "../_helpers/apps.ts";
import { callThrough } from "../_helpers/host_calls.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
  startServerProcess,
} from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");

const MAIN = `import os

${SERVER_PID_PY}

SIZES = []

def double(x, tag="none"):
    SIZES.append(len(x))
    return [{"x": v * 2, "tag": t, "server": _server_pid()} for v, t in zip(x, tag)]

def sizes():
    return SIZES

def who():
    return {"server": _server_pid()}
`;

/** One replica; a batch of 8 leaves only when full (or after 10 s). */
const TOML = `[deployment]\nname = "twice"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\ncooldown = 300\n\n`
  + `[functions.double]\nbatch = { max_size = 8, wait_ms = 10000 }\n`;

type Doubled = { x: number; tag: string; server: number };

async function call(host: ServerProcess, fn: string, body: Record<string, unknown>) {
  const { response, worker } = await callThrough(host, `/v4/${PROCESS_PROJECT}/twice/${fn}`, body);
  const text = await response.text();
  assert.equal(response.status, 200, text);
  return { result: (JSON.parse(text) as { result: unknown }).result, worker };
}

describe("batches through a host's two workers", () => {
  let dirs: ServerDirs;
  let host: ServerProcess;
  before(async () => {
    dirs = await makeServerDirs("runplane-batch-workers-");
    await dirs.deploy("twice", { "runplane.toml": TOML, "main.py": MAIN });
    host = await startServerProcess({ ...dirs.env, RUNPLANE_WORKERS: "2" });
  });
  after(async () => {
    await host?.kill();
    await dirs?.remove();
  });

  it("groups calls that arrive through either worker into one batch, each answered with its own result", async () => {
    await call(host, "who", {});
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => call(host, "double", i % 3 ? { x: i, tag: `t${i}` } : { x: i })),
    );
    answers.forEach(({ result }, i) => {
      const doubled = result as Doubled;
      assert.equal(doubled.x, i * 2);
      assert.equal(doubled.tag, i % 3 ? `t${i}` : "none");
    });
    assert.deepEqual(new Set(answers.map((a) => a.worker)), new Set(["1", "2"]), "both workers took calls");
    assert.deepEqual((await call(host, "sizes", {})).result, [8]);
  });
});

describe("batches across two hosts of a cluster", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  const dirs: ServerDirs[] = [];
  const hosts: ServerProcess[] = [];
  before(async () => {
    database = await createTestDatabase();
    for (const name of ["a", "b"]) {
      const d = await makeServerDirs(`runplane-batch-cluster-${name}-`);
      await d.deploy("twice", { "runplane.toml": TOML, "main.py": MAIN });
      dirs.push(d);
    }
    hosts.push(await startClusterHost(dirs[0], { databaseUrl: database.url }));
    hosts.push(await startClusterHost(dirs[1], { databaseUrl: database.url, token: hosts[0].token }));
  });
  after(async () => {
    await Promise.all(hosts.map((host) => host.kill()));
    await database?.drop();
    for (const d of dirs) await d.remove();
  });

  it("groups calls landing on both hosts into one batch on the host holding the replica", async () => {
    const placed = (await call(hosts[0], "who", {})).result as { server: number };
    assert.equal(placed.server, hosts[0].child.pid, "the first host holds the one replica");
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => call(hosts[i % 2], "double", { x: 100 + i, tag: `h${i % 2}` })),
    );
    answers.forEach(({ result }, i) => {
      const doubled = result as Doubled;
      assert.deepEqual([doubled.x, doubled.tag, doubled.server], [(100 + i) * 2, `h${i % 2}`, placed.server]);
    });
    assert.deepEqual((await call(hosts[1], "sizes", {})).result, [8]);
  });
});
