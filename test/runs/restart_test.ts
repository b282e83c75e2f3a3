import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { startTestServer, TEST_PROJECT } from "../_helpers/server.ts";
import { createTestExecutor } from "../_helpers/test_executor.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

it("after a restart on the same data dir: queued runs run, a running one ends interrupted, pending webhooks are delivered", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "runplane-restart-"));
  after(() => rm(dataDir, { recursive: true, force: true }));
  // The first attempt of every delivery answers 404 so deliveries are pending when the server stops.
  const seen = new Map<string, number>();
  const receiver = await startWebhookReceiver((_n, request) => {
    const runId = String(request.headers["x-request-id"]);
    seen.set(runId, (seen.get(runId) ?? 0) + 1);
    return seen.get(runId) === 1 ? 404 : 200;
  });
  after(() => receiver.close());
  const env = { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1", RUNPLANE_RUN_LEASE: "1s", RUNPLANE_WEBHOOK_RETRY_DELAY: "5s" };

  const first = createTestExecutor({ slots: 1 });
  const a = await startTestServer({ dataDir, env, serverOptions: { executor: first.executor } });
  const submit = (functionName: string) => a.server.context.runs.submit({
    projectId: TEST_PROJECT, app: "r", functionName, mode: "async", input: {}, webhook: { endpoint: receiver.url },
  });
  const done = (await submit("echo")) as { runId: string };
  await eventually(async () => (seen.get(done.runId) === 1 ? true : undefined), 10_000, "the first delivery's first attempt");
  const hanging = (await submit("hang")) as { runId: string };
  await eventually(async () => (first.started.includes(hanging.runId) ? true : undefined), 10_000, "the hanging run to start");
  const queued: string[] = [];
  for (let i = 0; i < 5; i++) queued.push(((await submit("echo")) as { runId: string }).runId);
  await a.close();
  assert.equal(first.started.length, 2, "only the first two runs started before the stop");

  const second = createTestExecutor({ slots: 1 });
  const b = await startTestServer({ dataDir, env, serverOptions: { executor: second.executor } });
  after(() => b.close());
  const get = (runId: string) => b.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
    params: { path: { project_id: TEST_PROJECT, app_id: "r", run_id: runId } },
  });
  for (const runId of [done.runId, hanging.runId, ...queued]) {
    await eventually(async () => ((await get(runId)).data?.webhook?.status === "delivered" ? true : undefined), 30_000, `${runId}'s webhook`);
  }
  const interrupted = (await get(hanging.runId)).data;
  assert.equal(interrupted?.status, "failure");
  assert.equal(interrupted?.error?.type, "interrupted");
  assert.deepEqual(second.started, queued, "queued runs ran after the restart, in order; the interrupted one did not run again");
  for (const runId of queued) assert.equal((await get(runId)).data?.status, "success");
  assert.equal((await get(done.runId)).data?.webhook?.attempts.length, 2, "the delivery pending at the stop was attempted after the restart");
  const bodies = receiver.requests.filter((r) => r.headers["x-request-id"] === hanging.runId).map((r) => JSON.parse(r.body.toString()));
  assert.equal(bodies.at(-1).error.type, "interrupted");
});
