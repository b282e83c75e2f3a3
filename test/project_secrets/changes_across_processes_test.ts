/**
 * A project secrets change made through a server process reaches the change listener of another process
 * sharing its PostgreSQL database, with the fingerprint the change made.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { it } from "node:test";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines } from "../_helpers/postgres.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");
const WATCHER = join(import.meta.dirname, "_fixtures", "watch_changes.ts");

it("a change through one server process is told to a listener in another process", {
  skip: !POSTGRES && "needs PostgreSQL",
  timeout: 120_000,
}, async () => {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = await makeServerDirs("runplane-secrets-");
  defer(() => dirs.remove());
  const server = await startServerProcess({ ...dirs.env, RUNPLANE_DATABASE_URL: database.url });
  defer(() => server.kill());

  const watcher = spawn(process.execPath, ["--import", "tsx", WATCHER, database.url], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  const exited = new Promise((resolve) => watcher.once("exit", resolve));
  defer(async () => {
    watcher.stdin.end();
    const timer = setTimeout(() => watcher.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
  });
  let stderr = "";
  watcher.stderr.on("data", (chunk) => (stderr += String(chunk)));
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: watcher.stdout }).on("line", (line) => {
    lines.push(line);
    for (const wake of waiters.splice(0)) wake();
  });
  async function line(expected: string): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (!lines.includes(expected)) {
      assert.ok(Date.now() < deadline, `the watcher did not print ${expected}: ${JSON.stringify(lines)} ${stderr}`);
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 250);
      });
    }
  }
  await line("listening");

  const secret = `${server.url}/v3/projects/${PROCESS_PROJECT}/secrets/API_KEY`;
  const headers = { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json" };
  const set = await fetch(secret, { method: "PUT", headers, body: JSON.stringify({ value: "v1" }) });
  assert.equal(set.status, 201, await set.text());
  await line(`changed ${PROCESS_PROJECT} v1`);
  const deleted = await fetch(secret, { method: "DELETE", headers });
  assert.equal(deleted.status, 204);
  await line(`changed ${PROCESS_PROJECT} v2`);
});
