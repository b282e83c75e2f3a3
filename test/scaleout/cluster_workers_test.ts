/**
 * A host with workers in a cluster (issues 31 and 33): its supervisor is the cluster's host (seats,
 * placement, forwarding), its workers serve the advertised port. A call through a worker goes to warm
 * capacity anywhere in the cluster; a call another host forwards to the port runs on the supervisor's
 * replicas; `getApp` through a worker shows the cluster's replicas per host, this host marked as itself.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { after, before, describe, it } from "node:test";
import { Agent } from "undici";
import { SERVER_PID_PY, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import { type AppRef, callRun } from "../_helpers/runs.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
} from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");

const MAIN = `import os, time

${SERVER_PID_PY}

def who():
    return {"replica": os.getpid(), "server": _server_pid()}

def wait_gate(gate):
    while not os.path.exists(gate):
        time.sleep(0.02)
    return {"replica": os.getpid(), "server": _server_pid()}
`;

/** One replica in the whole cluster. */
const toml = (name: string) =>
  `[deployment]\nname = "${name}"\n\n[scaling]\nmin_replicas = 0\nmax_replicas = 1\nreplica_concurrency = 4\ncooldown = 300\n`;

type Who = { replica: number; server: number };
type Hosts = { url: string | null; this_host: boolean; ready: number; starting: number }[];

describe("a host with workers in a cluster", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  const dirs: ServerDirs[] = [];
  /** [0]: a host with two workers; [1]: a host of one process. */
  const hosts: ServerProcess[] = [];
  const on = (server: ServerProcess, app: string): AppRef => ({ client: server.client, project: PROCESS_PROJECT, app });

  before(async () => {
    database = await createTestDatabase();
    for (const name of ["workers", "single"]) dirs.push(await makeServerDirs(`runplane-cluster-${name}-`));
    for (const d of dirs) {
      await d.deploy("there", { "runplane.toml": toml("there"), "main.py": MAIN });
      await d.deploy("here", { "runplane.toml": toml("here"), "main.py": MAIN });
    }
    hosts.push(await startClusterHost(dirs[0], { databaseUrl: database.url, env: { RUNPLANE_WORKERS: "2" } }));
    hosts.push(await startClusterHost(dirs[1], { databaseUrl: database.url, token: hosts[0].token }));
  });
  after(async () => {
    await Promise.all(hosts.map((host) => host.kill()));
    await database?.drop();
    for (const d of dirs) await d.remove();
  });

  async function who(host: ServerProcess, app: string, via?: Agent): Promise<Who & { worker: string | null }> {
    const response = await checkedFetch(`${host.url}/v4/${PROCESS_PROJECT}/${app}/who`, {
      method: "POST",
      headers: { Authorization: `Bearer ${host.token}`, "Content-Type": "application/json" },
      body: "{}",
      dispatcher: via ?? new Agent({ connections: 1 }),
    } as RequestInit);
    assert.equal(response.status, 200, await response.clone().text());
    const { result } = (await response.json()) as { result: Who };
    return { ...result, worker: response.headers.get("x-runplane-worker") };
  }

  it("runs a call another host forwards to its port on the supervisor's replica", async () => {
    // The first call lands on the host with workers: its supervisor places the one replica there.
    const first = await who(hosts[0], "here");
    assert.equal(first.server, hosts[0].child.pid, "the supervisor runs the replica");
    // Calls landing on the other host go to that warm replica, through the workers' port.
    const served = await Promise.all(Array.from({ length: 6 }, async () => {
      const { data, response } = await callRun(on(hosts[1], "here"), "who");
      assert.equal(response.status, 200, JSON.stringify(data));
      return (data as { result: Who }).result;
    }));
    assert.deepEqual(
      new Set(served.map((w) => `${w.server}/${w.replica}`)),
      new Set([`${first.server}/${first.replica}`]),
    );
  });

  it("sends its workers' calls to a warm replica on another host", async () => {
    const first = await who(hosts[1], "there");
    assert.equal(first.server, hosts[1].child.pid, "the single host placed the replica");
    const workers = new Set<string | null>();
    for (let i = 0; i < 8; i++) {
      const answer = await who(hosts[0], "there");
      assert.equal(`${answer.server}/${answer.replica}`, `${first.server}/${first.replica}`);
      workers.add(answer.worker);
    }
    assert.deepEqual([...workers].sort(), ["1", "2"], "both workers took calls");
  });

  /** The app's replicas per host, as the worker a new connection reaches answers. */
  async function hostsOf(app: string): Promise<Hosts> {
    const response = await checkedFetch(`${hosts[0].url}/v3/projects/${PROCESS_PROJECT}/apps/${app}`, {
      headers: { Authorization: `Bearer ${hosts[0].token}` },
      dispatcher: new Agent({ connections: 1 }),
    } as RequestInit);
    assert.equal(response.status, 200);
    return ((await response.json()) as { replicas: { hosts: Hosts } }).replicas.hosts;
  }

  it("shows the cluster's replicas per host through each worker, itself marked as this host", async () => {
    // The view is the supervisor's, as it last sent it (within a heartbeat and a quarter second).
    const expected = (app: string) =>
      JSON.stringify(
        app === "here" ? [[hosts[0].url, true, 1]] : [[hosts[1].url, false, 1]],
      );
    const seen = async (app: string) =>
      JSON.stringify((await hostsOf(app)).map((h) => [h.url, h.this_host, h.ready + h.starting]));
    for (const app of ["here", "there"]) {
      await waitFor(async () => (await seen(app)) === expected(app), `${app}'s replicas per host`, 10_000);
      // Every worker answers the same.
      for (let i = 0; i < 4; i++) assert.equal(await seen(app), expected(app));
    }
  });

  it("gives its seats to another host as soon as it drains, while its workers' call in flight finishes", async () => {
    const draining = hosts[0];
    const gate = join(dirs[0].root, `drain-gate-${Date.now()}`);
    const inFlight = callRun(on(draining, "here"), "wait_gate", { body: { gate } });
    await sleep(500);
    draining.child.kill("SIGTERM");
    await waitFor(
      () => draining.logs.filter((line) => String(line.msg).startsWith("draining:")).length >= 3,
      "the supervisor and both workers to begin draining",
      30_000,
    );
    // Served on the other host while this one still drains (its call waits on the gate).
    let answer: Who | undefined;
    await waitFor(
      async () => {
        const { data, response } = await callRun(on(hosts[1], "here"), "who");
        if (response.status === 200) answer = (data as { result: Who }).result;
        return answer !== undefined;
      },
      "a call served on the other host during the drain",
      60_000,
    );
    assert.equal(answer!.server, hosts[1].child.pid);
    assert.equal(draining.child.exitCode, null, "the host with workers is still draining");
    await writeFile(gate, "");
    const finished = await inFlight;
    assert.equal(finished.response.status, 200, "the call in flight finished on the draining host");
    assert.equal((finished.data as { result: Who }).result.server, draining.child.pid);
    assert.deepEqual(await draining.exited, { code: 0, signal: null });
  });
});
