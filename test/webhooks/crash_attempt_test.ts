import assert from "node:assert/strict";
import { after, it } from "node:test";
import { type AppRef, callRun, getRun } from "../_helpers/runs.ts";
import { makeServerDirs, type ServerProcess, startServerProcess } from "../_helpers/server_process.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

const PROJECT = "p-demo";

function track(server: ServerProcess): ServerProcess {
  after(() => server.kill());
  return server;
}

it("kill -9 while the receiver holds an attempt: after the restart the record lists every attempt the receiver saw", async () => {
  const dirs = await makeServerDirs("runplane-attempt-crash-");
  after(() => dirs.remove());
  await dirs.deploy("hooked", {
    "runplane.toml": `[deployment]\nname = "hooked"\n\n[scaling]\nmax_replicas = 1\n`,
    "main.py": `def quick():\n    return "quick"\n`,
  });

  // The first request of each run is held (never answered): the server dies while it waits for it.
  const received = new Map<string, number>();
  const receiver = await startWebhookReceiver((_n, request) => {
    const runId = String(request.headers["x-request-id"]);
    received.set(runId, (received.get(runId) ?? 0) + 1);
    return received.get(runId) === 1 ? "hang" : 200;
  });
  after(() => receiver.close());
  const env = {
    ...dirs.env,
    RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1",
    // Long enough that the held attempt is still in flight at the kill, whatever the machine's load.
    RUNPLANE_WEBHOOK_TIMEOUT: "60s",
    RUNPLANE_WEBHOOK_RETRY_DELAY: "200ms",
  };

  const first = track(await startServerProcess(env));
  let ref: AppRef = { client: first.client, project: PROJECT, app: "hooked" };
  const { data, response } = await callRun(ref, "quick", { webhookEndpoint: receiver.url });
  assert.equal(response.status, 200);
  const runId = (data as { run_id: string }).run_id;
  await eventually(async () => (received.get(runId) === 1 ? true : undefined), 30_000, "the first attempt to arrive");
  await first.kill();

  const second = track(await startServerProcess(env, { token: first.token }));
  ref = { client: second.client, project: PROJECT, app: "hooked" };
  const run = await eventually(
    async () => {
      const { data: found } = await getRun(ref, runId);
      return found?.webhook?.status === "delivered" ? found : undefined;
    },
    60_000,
    "the webhook to be delivered after the restart",
  );
  assert.equal(received.get(runId), 2, "the receiver saw the held attempt and the one after the restart");
  const attempts = run.webhook?.attempts ?? [];
  assert.equal(attempts.length, received.get(runId), JSON.stringify(attempts));
  assert.deepEqual(attempts.map((a) => a.attempt), [1, 2]);
  assert.equal(attempts[0].status_code, null);
  assert.match(attempts[0].error ?? "", /server stopped during this attempt/);
  assert.equal(attempts[1].status_code, 200);
});
