/**
 * Deployments on two processes sharing one PostgreSQL: a deployment made through one is built once and
 * served by both (each materialises the stored bundle on its own host), and a rollback through the
 * other switches both.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { packBundle } from "../../client/bundle.ts";
import { hostPid, replicaPid, waitFor } from "../_helpers/apps.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines } from "../_helpers/postgres.ts";
import { makeServerDirs, PROCESS_PROJECT, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");

/** What the app answers: its version, and its worker's pid (in its sandbox's namespace) and folder. */
interface Answer {
  v: string;
  pid: number;
  dir: string;
}

/** Whether the worker that gave `answer` runs in a replica `server` started (its host pid found by its folder). */
function startedBy(server: ServerProcess, answer: Answer | undefined): boolean {
  if (!answer) return false;
  try {
    replicaPid(hostPid(answer.dir, answer.pid), server.child.pid);
    return true;
  } catch {
    return false;
  }
}

async function bundle(version: string): Promise<Uint8Array> {
  const dir = await mkdtemp(join(tmpdir(), "runplane-deploy-bundle-"));
  try {
    await writeFile(join(dir, "runplane.toml"), `[deployment]\nname = "shared"\n`);
    await writeFile(
      join(dir, "main.py"),
      `import os\n\ndef run():\n    return {"v": "${version}", "pid": os.getpid(), "dir": os.getcwd()}\n`,
    );
    return (await packBundle(dir)).bytes;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

it("a deployment made through one process serves on both, and a rollback through the other switches both", {
  skip: !POSTGRES,
}, async () => {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = [await makeServerDirs("runplane-deploy-a-"), await makeServerDirs("runplane-deploy-b-")];
  defer(() => Promise.all(dirs.map((d) => d.remove())));
  const env = (i: number) => ({ ...dirs[i].env, RUNPLANE_DATABASE_URL: database.url });
  const a: ServerProcess = await startServerProcess(env(0));
  defer(() => a.kill());
  const b: ServerProcess = await startServerProcess(env(1), { token: a.token });
  defer(() => b.kill());
  const headers = { Authorization: `Bearer ${a.token}` };
  const deployments = `/v3/projects/${PROCESS_PROJECT}/apps/shared/deployments`;

  async function deployThrough(server: ServerProcess, version: string): Promise<string> {
    const response = await fetch(`${server.url}${deployments}`, {
      method: "POST",
      headers: { ...headers, "Content-Type": "application/gzip" },
      body: new Uint8Array(await bundle(version)),
    });
    assert.equal(response.status, 202, await response.clone().text());
    const { deployment_id } = (await response.json()) as { deployment_id: string };
    await waitFor(
      async () => {
        const got = await fetch(`${server.url}${deployments}/${deployment_id}`, { headers });
        const { status } = (await got.json()) as { status: string };
        assert.notEqual(status, "failed");
        return status === "ready";
      },
      `deployment ${version} to be ready`,
      60_000,
    );
    return deployment_id;
  }

  async function versionOn(server: ServerProcess): Promise<Answer | undefined> {
    const response = await fetch(`${server.url}/v4/${PROCESS_PROJECT}/shared/run`, {
      method: "POST",
      headers: { ...headers, "Content-Type": "application/json" },
      body: "{}",
    });
    if (response.status !== 200) return undefined;
    return ((await response.json()) as { result: Answer }).result;
  }

  const first = await deployThrough(a, "1");
  for (const server of [a, b]) {
    await waitFor(async () => (await versionOn(server))?.v === "1", "version 1 on each process", 30_000);
  }
  // Each process runs its own replicas: the worker's replica was started by that process.
  assert.ok(startedBy(a, await versionOn(a)), "A's call ran on a replica of A");
  assert.ok(startedBy(b, await versionOn(b)), "B's call ran on a replica of B");
  assert.ok(!startedBy(b, await versionOn(a)), "A's call did not run on a replica of B");

  await deployThrough(b, "2");
  for (const server of [a, b]) {
    await waitFor(async () => (await versionOn(server))?.v === "2", "version 2 on each process", 30_000);
  }
  const rollback = await fetch(`${b.url}${deployments}/${first}/activate`, { method: "POST", headers });
  assert.equal(rollback.status, 200);
  for (const server of [a, b]) {
    await waitFor(async () => (await versionOn(server))?.v === "1", "the rollback on each process", 30_000);
  }
});
