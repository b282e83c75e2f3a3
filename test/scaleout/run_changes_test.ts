/** Run changes on two processes sharing one PostgreSQL: a subscriber on one sees the other's runs. */
import assert from "node:assert/strict";
import { it } from "node:test";
import { followEvents } from "../_helpers/event_reader.ts";
import { deferCleanup } from "../_helpers/cleanup.ts";
import { createTestDatabase, engines } from "../_helpers/postgres.ts";
import { getRun } from "../_helpers/runs.ts";
import { makeServerDirs, PROCESS_PROJECT, startServerProcess } from "../_helpers/server_process.ts";

const POSTGRES = (await engines()).includes("postgres");

it("a run made through one process is followed live on the other", { skip: !POSTGRES }, async () => {
  const defer = deferCleanup();
  const database = await createTestDatabase();
  defer(() => database.drop());
  const dirs = [await makeServerDirs("runplane-events-a-"), await makeServerDirs("runplane-events-b-")];
  defer(() => Promise.all(dirs.map((d) => d.remove())));
  for (const d of dirs) {
    await d.deploy("hello", { "runplane.toml": "", "main.py": "def run(name='x'):\n    return name\n" });
  }
  const env = (i: number) => ({ ...dirs[i].env, RUNPLANE_DATABASE_URL: database.url });
  const a = await startServerProcess(env(0));
  defer(() => a.kill());
  const b = await startServerProcess(env(1), { token: a.token });
  defer(() => b.kill());
  const feed = await followEvents(`${a.url}/v4/projects/${PROCESS_PROJECT}/runs/events`, {
    Authorization: `Bearer ${a.token}`,
  });
  defer(() => feed.stop());
  // A change made before every process has heard of the new stream may not be sent (the stream's
  // `resync` says when they have: docs/run-api.md); CI once made the run before b had heard.
  await feed.waitFor((e) => e.event === "resync", 30_000);
  const response = await fetch(`${b.url}/v4/${PROCESS_PROJECT}/hello/run?async=true`, {
    method: "POST",
    headers: { Authorization: `Bearer ${a.token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ name: "from b" }),
  });
  assert.equal(response.status, 202);
  const { run_id: runId } = (await response.json()) as { run_id: string };
  try {
    await feed.waitFor((e) => e.data.includes(runId) && e.data.includes('"success"'), 30_000);
  } catch (error) {
    // CI saw no change of the run at all after the resync, twice; say what the run and the processes did.
    const run = (await getRun({ client: b.client, project: PROCESS_PROJECT, app: "hello" }, runId)).data;
    const notable = (server: typeof a) =>
      server.logs.filter((line) => Number(line.level) >= 40 || /watch|change|notif|listen/i.test(String(line.msg)));
    throw new Error(
      `${(error as Error).message}\nrun: ${JSON.stringify(run)}\na's warnings: ${JSON.stringify(notable(a))}`
        + `\nb's warnings: ${JSON.stringify(notable(b))}`,
    );
  }
  // Changes told by different processes may arrive out of order: each says when it happened.
  const statuses = feed.events.filter((e) => e.data.includes(runId)).map((e) =>
    JSON.parse(e.data) as { at: string; status: string }
  )
    .sort((x, y) => Date.parse(x.at) - Date.parse(y.at)).map((c) => c.status);
  assert.deepEqual(statuses, ["queued", "running", "success"]);
});
