/**
 * Three processes on one PostgreSQL as one cluster (issue 31, part 5 "Visible"): every host's `getApp`
 * lists the app's replicas per host from its cached view of the cluster, a host without the replica
 * included (the holder's URL, ready, calls in flight, the holder's GPUs), and every host's /metrics has
 * the holder's seat and calls.
 */
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { SERVER_PID_PY } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { createTestDatabase, engines, type TestDatabase } from "../_helpers/postgres.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startClusterHost,
} from "../_helpers/server_process.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const POSTGRES = (await engines()).includes("postgres");

const WARM = `[deployment]\nname = "warm"\n\n[scaling]\nmin_replicas = 1\nmax_replicas = 1\n`
  + `replica_concurrency = 4\ncooldown = 300\n`;

const MAIN = `import os, time

${SERVER_PID_PY}

def wait(gate):
    while not os.path.exists(gate):
        time.sleep(0.02)
    return _server_pid()
`;

describe("three processes as one cluster: replicas per host in getApp and /metrics", { skip: !POSTGRES }, () => {
  let database: TestDatabase;
  const dirs: ServerDirs[] = [];
  const hosts: ServerProcess[] = [];

  async function startHost(i: number, token?: string): Promise<ServerProcess> {
    // Host i has i + 1 (fake) GPUs: each host's entry says its own.
    const gpus = Array.from({ length: i + 1 }, (_, g) => `GPU-${i}${g}`).join(",");
    return await startClusterHost(dirs[i], {
      databaseUrl: database.url,
      token,
      env: { RUNPLANE_GPUS: gpus, RUNPLANE_NVIDIA_SMI: "/nonexistent/nvidia-smi" },
    });
  }

  async function getApp(host: ServerProcess) {
    const app = await getAppOnceLoaded(host);
    assert.ok(app, "the app is loaded on every host");
    return app;
  }

  /** The app as `host` shows it, or undefined while the host is still loading its apps (a 404 then). */
  async function getAppOnceLoaded(host: ServerProcess) {
    const { data, response } = await host.client.GET("/v3/projects/{project_id}/apps/{app_id}", {
      params: { path: { project_id: PROCESS_PROJECT, app_id: "warm" } },
    });
    if (response.status === 404) return undefined;
    assert.equal(response.status, 200);
    return data!;
  }

  async function metrics(host: ServerProcess): Promise<string> {
    const response = await checkedFetch(`${host.url}/metrics`);
    assert.equal(response.status, 200);
    return await response.text();
  }

  /** The host whose own replicas include the app's one warm replica, once it is ready. */
  async function holder(): Promise<number> {
    return await eventually(
      async () => {
        // A host just started may still be loading its apps: it answers 404 until it has.
        const apps = await Promise.all(hosts.map((host) => getAppOnceLoaded(host)));
        if (apps.some((app) => app === undefined)) return undefined;
        const own = apps.map((app) => app!.replicas.idle);
        const ready = own.flatMap((idle, i) => (idle === 1 ? [i] : []));
        return ready.length === 1 ? ready[0] : undefined;
      },
      60_000,
      "one warm replica, ready",
    );
  }

  before(async () => {
    database = await createTestDatabase();
    for (const name of ["a", "b", "c"]) dirs.push(await makeServerDirs(`runplane-visible-${name}-`));
    for (const d of dirs) await d.deploy("warm", { "runplane.toml": WARM, "main.py": MAIN });
    hosts.push(await startHost(0));
    for (const i of [1, 2]) hosts.push(await startHost(i, hosts[0].token));
  });
  after(async () => {
    await Promise.all(hosts.map((host) => host.kill()));
    await database?.drop();
    for (const d of dirs) await d.remove();
  });

  it("lists the holder's host, ready, in getApp on every host, those without the replica included", async () => {
    const i = await holder();
    for (const [j, host] of hosts.entries()) {
      const hostsOfApp = await eventually(
        async () => {
          const listed = (await getApp(host)).replicas.hosts;
          return listed.length === 1 && listed[0].ready === 1 ? listed : undefined;
        },
        30_000,
        `host ${j} to list the holder's replica ready`,
      );
      assert.equal(hostsOfApp[0].url, hosts[i].url);
      assert.equal(hostsOfApp[0].this_host, i === j, `host ${j}'s own entry is marked`);
      assert.equal(hostsOfApp[0].starting, 0);
      assert.equal(hostsOfApp[0].slots, 4);
      assert.equal(hostsOfApp[0].host_gpus, i + 1, "the holder's GPUs");
      if (j !== i) {
        const own = (await getApp(host)).replicas;
        assert.equal(own.starting + own.idle + own.busy, 0, `host ${j} runs no replica of its own`);
      }
    }
  });

  it("shows a call forwarded to the holder as busy on a host without the replica, in getApp and /metrics", async () => {
    const i = await holder();
    const other = hosts[(i + 1) % 3];
    const app = `${PROCESS_PROJECT}/warm`;
    const seats = `runplane_cluster_seats{app="${app}",host="${hosts[i].url}",state="ready"} 1`;
    assert.ok((await metrics(other)).includes(seats), `the seat in the other host's metrics:\n${await metrics(other)}`);
    const gate = join(dirs[0].root, `gate-${Date.now()}`);
    const call = other.client.POST("/v4/{project_id}/{app_name}/{function_name}", {
      params: { path: { project_id: PROCESS_PROJECT, app_name: "warm", function_name: "wait" } },
      body: { gate },
    });
    try {
      await eventually(
        async () => ((await getApp(other)).replicas.hosts[0]?.busy === 1 ? true : undefined),
        30_000,
        "the call in flight in the other host's view",
      );
      const calls = `runplane_cluster_calls_in_flight{app="${app}",host="${hosts[i].url}"} 1`;
      assert.ok((await metrics(other)).includes(calls), `the call in the other host's metrics`);
    } finally {
      await writeFile(gate, "");
    }
    const { data, response } = await call;
    assert.equal(response.status, 200);
    assert.equal((data as { result: number }).result, hosts[i].child.pid, "the holder ran it");
  });
});
