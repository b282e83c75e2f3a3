/**
 * Two servers on one host, each with a replica in cgroups of its own, and one killed with SIGKILL: the
 * next server to start removes the dead one's cgroups and nothing of the live one's, whose replica serves
 * on. Real server processes, real cgroups.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { removeCgroupDirs } from "../../server/sandbox/_cgroup_tree.ts";
import { hostPid } from "../_helpers/apps.ts";
import { cgroupsWork } from "../_helpers/cgroups.ts";
import {
  makeServerDirs,
  PROCESS_PROJECT,
  type ServerDirs,
  type ServerProcess,
  startServerProcess,
} from "../_helpers/server_process.ts";
import { testCgroupPlace } from "./_cgroup_place.ts";

const NAMESPACE = /\[(\d+)\]/.exec(readlinkSync("/proc/self/ns/pid"))![1];

const APP = {
  "runplane.toml": "[scaling]\nmax_replicas = 1\n",
  "main.py": "import os\n\ndef pid():\n    return os.getpid()\n",
};

/** A server of this test, with its folders and its app's. */
interface Server {
  process: ServerProcess;
  dirs: ServerDirs;
  appDir?: string;
}

/** The Runplane folders (one per hierarchy) a server says at start it makes replicas' cgroups in. */
function parentsOf(server: Server): string[] {
  const line = server.process.logs.find((l) => String(l.msg).startsWith("cgroups: each replica is limited"));
  return (line?.parents as string[] | undefined) ?? [];
}

/** A server's folder name under `runplane/`: its pid namespace and pid come first. */
function folderOf(server: Server): string {
  const [parent] = parentsOf(server);
  assert.ok(parent, `the server says where replicas' cgroups are: ${JSON.stringify(server.process.logs)}`);
  const found = readdirSync(parent).filter((name) => name.startsWith(`${NAMESPACE}-${server.process.child.pid}-`));
  assert.equal(found.length, 1, `one folder of server ${server.process.child.pid} in ${parent}: ${found}`);
  return found[0];
}

/** Calls `hello.pid` of a server: the replica's pid in its own namespace. */
async function callPid(server: Server): Promise<number> {
  const response = await fetch(`${server.process.url}/v4/${PROCESS_PROJECT}/hello/pid`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.process.token}`, "Content-Type": "application/json" },
    body: "{}",
  });
  const body = await response.text();
  assert.equal(response.status, 200, body);
  return (JSON.parse(body) as { result: number }).result;
}

/** Whether the cgroup folder `dir`, or one below it, lists process `pid`. */
function holds(dir: string, pid: number): boolean {
  const procs = readFileSync(join(dir, "cgroup.procs"), "utf8").split("\n");
  return procs.includes(String(pid))
    || readdirSync(dir, { withFileTypes: true }).some((e) => e.isDirectory() && holds(join(dir, e.name), pid));
}

/** Stops a server as an operator would (its cgroups go with it), or kills it when it does not stop. */
async function stop(server: Server): Promise<void> {
  const { child, exited } = server.process;
  if (child.exitCode === null && child.signalCode === null) {
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    await exited;
    clearTimeout(timer);
  }
  await server.dirs.remove();
}

if (await cgroupsWork("the test of cgroup cleanup between servers")) {
  describe("two servers on one host, one killed with SIGKILL", () => {
    const place = testCgroupPlace();
    const servers: Server[] = [];
    const folders = new Set<string>();
    after(async () => {
      for (const server of servers) await stop(server);
      // What a server killed by a failed assertion left, in the servers' own place (v2) as in this test's.
      for (const parent of new Set(servers.flatMap(parentsOf))) {
        for (const dir of [...folders].map((name) => join(parent, name)).filter((d) => existsSync(d))) {
          const replicas = readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory());
          await removeCgroupDirs([...replicas.map((e) => join(dir, e.name)), dir]);
        }
      }
      await place.remove();
    });

    async function start(name: string, app?: Record<string, string>): Promise<Server> {
      const dirs = await makeServerDirs(`runplane-cgroup-cleanup-${name}-`);
      const appDir = app && await dirs.deploy("hello", app);
      const started = await place.startInside(() =>
        startServerProcess({ ...dirs.env, RUNPLANE_CGROUPS: "required" }).catch(async (error: Error) => {
          await dirs.remove();
          throw error;
        })
      );
      const server = { process: started, dirs, appDir };
      servers.push(server);
      folders.add(folderOf(server));
      return server;
    }

    it("the next server to start removes the dead one's cgroups, and none of the live one's", async () => {
      const dead = await start("dead", APP);
      const live = await start("live", APP);
      await callPid(dead);
      const reported = await callPid(live);
      const replica = hostPid(live.appDir!, reported);
      const [deadFolder, liveFolder] = [folderOf(dead), folderOf(live)];
      const parents = parentsOf(live);
      assert.deepEqual(parentsOf(dead), parents, "both servers share the hierarchies' Runplane folders");
      for (const parent of parents) assert.ok(holds(join(parent, liveFolder), replica), `${parent}: the replica`);

      await dead.process.kill();
      for (const parent of parents) assert.ok(existsSync(join(parent, deadFolder)), `${parent}: left by the kill`);
      const next = await start("next");

      // It names whose cgroups it removed: the dead server's alone, once, by pid, start time and id.
      const [, pid, startTime, owner] = /^\d+-(\d+)-(\d+)-(.+)$/.exec(deadFolder)!;
      const removed = next.process.logs.find((l) => l.msg === "removed the cgroups of servers that are gone");
      assert.ok(
        Array.isArray(removed?.servers),
        `the log names whose cgroups were removed: ${JSON.stringify(removed)}`,
      );
      const servers = (removed.servers as Array<Record<string, unknown>>)
        // Where the servers' own place is shared with other tests (v2), only this test's servers count.
        .filter((s) => s.folder === deadFolder || s.folder === liveFolder || place.layout !== undefined);
      assert.deepEqual(
        servers.map((s) => [s.folder, s.pid, s.start_time, s.owner]),
        [[deadFolder, Number(pid), startTime, owner]],
        JSON.stringify(next.process.logs),
      );
      for (const parent of parents) {
        assert.equal(existsSync(join(parent, deadFolder)), false, `${parent}: the dead server's folder`);
        assert.ok(holds(join(parent, liveFolder), replica), `${parent}: the live server's replica is still in its own`);
      }
      // The live server's replica was not touched: the same process answers.
      assert.equal(await callPid(live), reported);
      assert.equal(hostPid(live.appDir!, reported), replica);
    });
  });
}
