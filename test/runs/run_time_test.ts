import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { type AppRef, callRun, getRun } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually, startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

describe("run_time_ms is the same in the answer, the record, the webhook and a replay", () => {
  let t: TestServer;
  let receiver: WebhookReceiver;
  const ref = (): AppRef => ({ client: t.client, project: TEST_PROJECT, app: "timed" });
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    await deployApp(t, "timed", {
      toml: `[deployment]\nname = "timed"\n\n[scaling]\nmax_replicas = 1\n`,
      files: {
        "main.py": "import time\n\ndef run(seconds=0):\n    time.sleep(seconds)\n    return {'slept': seconds}\n",
      },
    });
    receiver = await startWebhookReceiver();
  });
  after(async () => {
    await receiver.close();
    await t.close();
  });

  for (const seconds of [0, 0.05]) {
    it(`a sync call sleeping ${seconds} s`, async () => {
      const key = `timed-${seconds}-${Date.now()}`;
      const options = { body: { seconds }, idempotencyKey: key, webhookEndpoint: receiver.url };
      const first = await callRun(ref(), "run", options);
      assert.equal(first.response.status, 200);
      const answer = first.data as { run_id: string; run_time_ms: number };
      assert.ok(answer.run_time_ms >= seconds * 1000, `${answer.run_time_ms}`);

      const { data: record } = await getRun(ref(), answer.run_id);
      assert.equal(record?.run_time_ms, answer.run_time_ms, "the record says what was answered");

      const replay = await callRun(ref(), "run", options);
      assert.equal(replay.response.status, 200);
      const replayed = replay.data as { run_id: string; run_time_ms: number };
      assert.equal(replayed.run_id, answer.run_id);
      assert.equal(replayed.run_time_ms, answer.run_time_ms, "the replay says what was answered");

      const delivery = await eventually(async () =>
        receiver.requests.find((r) => r.headers["x-request-id"] === answer.run_id)
      );
      assert.equal(JSON.parse(delivery.body.toString()).run_time_ms, answer.run_time_ms, "the webhook too");
    });
  }
});
