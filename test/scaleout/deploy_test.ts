/**
 * Deployments on two processes sharing one PostgreSQL: a deployment made through one is built once and
 * served by both (each materialises the stored bundle on its own host), and a rollback through the
 * other switches both. Once a deploy reports ready, the other process follows within seconds, `getApp`
 * lists both processes with the deployment each serves, and a process that stops cleanly is not listed.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";
import { packBundle } from "../../client/bundle.ts";
import { hostPid, replicaPid, waitFor } from "../_helpers/apps.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { checkedFetch } from "../_helpers/contract.ts";
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

const APP_PATH = `/v3/projects/${PROCESS_PROJECT}/apps/shared`;

/** Deploys `version` of app `shared` through `server` and waits until it is ready; returns its id. */
async function deployVersion(server: ServerProcess, token: string, version: string): Promise<string> {
  const headers = { Authorization: `Bearer ${token}` };
  const response = await checkedFetch(`${server.url}${APP_PATH}/deployments`, {
    method: "POST",
    headers: { ...headers, "Content-Type": "application/gzip" },
    body: new Uint8Array(await bundle(version)),
  });
  assert.equal(response.status, 202, await response.clone().text());
  const { deployment_id } = (await response.json()) as { deployment_id: string };
  await waitFor(
    async () => {
      const got = await checkedFetch(`${server.url}${APP_PATH}/deployments/${deployment_id}`, { headers });
      const { status } = (await got.json()) as { status: string };
      assert.notEqual(status, "failed");
      return status === "ready";
    },
    `deployment ${version} to be ready`,
    60_000,
  );
  return deployment_id;
}

/** What app `shared` answers on `server` now (undefined unless 200). */
async function answerOf(server: ServerProcess, token: string): Promise<Answer | undefined> {
  const response = await checkedFetch(`${server.url}/v4/${PROCESS_PROJECT}/shared/run`, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: "{}",
  });
  if (response.status !== 200) return undefined;
  return ((await response.json()) as { result: Answer }).result;
}

/** Starts two server processes on a fresh PostgreSQL database, stopped and removed after the test. */
async function startTwo(prefix: string): Promise<[ServerProcess, ServerProcess]> {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = [await makeServerDirs(`${prefix}a-`), await makeServerDirs(`${prefix}b-`)];
  defer(() => Promise.all(dirs.map((d) => d.remove())));
  const env = (i: number) => ({ ...dirs[i].env, RUNPLANE_DATABASE_URL: database.url });
  const a = await startServerProcess(env(0));
  defer(() => a.kill());
  const b = await startServerProcess(env(1), { token: a.token });
  defer(() => b.kill());
  return [a, b];
}

it("a deployment made through one process serves on both, and a rollback through the other switches both", {
  skip: !POSTGRES,
}, async () => {
  const [a, b] = await startTwo("runplane-deploy-");
  const deployThrough = (server: ServerProcess, version: string) => deployVersion(server, a.token, version);
  const versionOn = (server: ServerProcess) => answerOf(server, a.token);
  const headers = { Authorization: `Bearer ${a.token}` };

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
  const rollback = await checkedFetch(`${b.url}${APP_PATH}/deployments/${first}/activate`, {
    method: "POST",
    headers,
  });
  assert.equal(rollback.status, 200);
  for (const server of [a, b]) {
    await waitFor(async () => (await versionOn(server))?.v === "1", "the rollback on each process", 30_000);
  }
});

/** The generous bound for a process to follow: a poll is 2 s, and the machine may be loaded. */
const FOLLOW_MS = 15_000;

type ServedBy = Array<{ process_id: string; host: string; deployment_id: string; since: string }>;

it("the other process follows a deployment within seconds, and getApp lists both processes", {
  skip: !POSTGRES,
  timeout: 240_000,
}, async () => {
  const [a, b] = await startTwo("runplane-follow-");
  const headers = { Authorization: `Bearer ${a.token}` };

  async function servedBy(server: ServerProcess): Promise<ServedBy> {
    const response = await checkedFetch(`${server.url}${APP_PATH}`, { headers });
    assert.equal(response.status, 200);
    return ((await response.json()) as { served_by: ServedBy }).served_by;
  }

  for (const version of ["1", "2"]) {
    const id = await deployVersion(a, a.token, version);
    const ready = performance.now();
    // The process that built it serves it already (either may have claimed the build).
    assert.ok((await servedBy(a)).some((s) => s.deployment_id === id), "the builder is listed at once");
    await waitFor(
      async () => (await answerOf(a, a.token))?.v === version && (await answerOf(b, a.token))?.v === version,
      `both processes to serve version ${version}`,
      FOLLOW_MS,
    );
    await waitFor(
      async () => {
        const listed = await servedBy(b);
        return listed.length === 2 && listed.every((s) => s.deployment_id === id);
      },
      `getApp to list both processes serving version ${version}`,
      FOLLOW_MS,
    );
    const listed = await servedBy(a);
    assert.equal(new Set(listed.map((s) => s.process_id)).size, 2, JSON.stringify(listed));
    console.log(`version ${version}: both processes serve it ${Math.round(performance.now() - ready)} ms after ready`);
  }

  // A clean stop (SIGTERM drains, then closes) removes B's row at once, without waiting for it to go stale.
  const before = (await servedBy(a)).map((s) => s.process_id);
  b.child.kill("SIGTERM");
  await b.exited;
  const after = (await servedBy(a)).map((s) => s.process_id);
  assert.equal(after.length, 1, `only A is left: ${after} (before: ${before})`);
  assert.ok(before.includes(after[0]));
});
