import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { verifyWebhook } from "../../client/webhook_verifier.ts";
import { deployApp } from "../_helpers/apps.ts";
import { engines } from "../_helpers/postgres.ts";
import { type AppRef, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually, startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

for (const engine of await engines()) {
  describe(`redeliverWebhook (${engine})`, () => {
    let t: TestServer;
    let receiver: WebhookReceiver;
    let ref: AppRef;

    before(async () => {
      t = await startTestServer({ engine, env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
      receiver = await startWebhookReceiver();
      await deployApp(t, "hook", {
        toml: "",
        files: { "main.py": "import time\n\ndef run(seconds=0):\n    time.sleep(seconds)\n    return {'ok': True}\n" },
      });
      ref = { client: t.client, project: TEST_PROJECT, app: "hook" };
    });
    after(async () => {
      await receiver?.close();
      await t?.close();
    });

    function redeliver(runId: string) {
      return t.client.POST("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver", {
        params: { path: { project_id: TEST_PROJECT, app_id: "hook", run_id: runId } },
      });
    }

    it("delivers a finished run's webhook once more, signed, and records the new attempt", async () => {
      const before = receiver.requests.length;
      const runId = await submitAsync(ref, "run", { webhookEndpoint: receiver.url, webhookSecret: "s3cret" });
      await receiver.waitFor(before + 1);
      await eventually(
        async () => {
          const run = await waitForStatus(ref, runId, ["success"]);
          return run.webhook?.status === "delivered" ? run : undefined;
        },
        10_000,
        "the first delivery to settle",
      );
      const { data, response } = await redeliver(runId);
      assert.equal(response.status, 200);
      assert.equal(data?.run_id, runId);
      await receiver.waitFor(before + 2);
      const [first, second] = receiver.requests.slice(before);
      assert.equal(second.body.toString(), first.body.toString(), "the same body");
      const verified = await verifyWebhook({ secret: "s3cret", headers: second.headers, body: second.body });
      assert.equal(verified.valid, true, JSON.stringify(verified));
      const run = await eventually(
        async () => {
          const found = await waitForStatus(ref, runId, ["success"]);
          return found.webhook?.attempts.length === 2 && found.webhook.status === "delivered" ? found : undefined;
        },
        10_000,
        "the second attempt to be recorded",
      );
      assert.deepEqual(run.webhook!.attempts.map((a) => [a.attempt, a.status_code]), [[1, 200], [2, 200]]);
    });

    /** Waits until the run's webhook has settled after `attempts` attempts. */
    function settled(runId: string, attempts: number) {
      return eventually(
        async () => {
          const run = await waitForStatus(ref, runId, ["success"]);
          return run.webhook?.status === "delivered" && run.webhook.attempts.length === attempts ? run : undefined;
        },
        10_000,
        `attempt ${attempts} to settle`,
      );
    }

    it("redelivers a run's webhook at most 5 times a minute; past that, 429 with Retry-After", async () => {
      const runId = await submitAsync(ref, "run", { webhookEndpoint: receiver.url });
      const other = await submitAsync(ref, "run", { webhookEndpoint: receiver.url });
      await settled(runId, 1);
      for (let i = 1; i <= 5; i++) {
        assert.equal((await redeliver(runId)).response.status, 200, `redelivery ${i}`);
        await settled(runId, i + 1);
      }
      const delivered = receiver.requests.length;
      const refused = await redeliver(runId);
      assert.equal(refused.response.status, 429);
      assert.equal(refused.response.headers.get("content-type"), "application/problem+json");
      const retryAfter = Number(refused.response.headers.get("retry-after"));
      assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 12, `Retry-After ${retryAfter}`);
      const problem = refused.error as { type: string; run_id: string; detail: string };
      assert.equal(problem.type, "https://runplane.dev/problems/too-many-requests");
      assert.equal(problem.run_id, runId);
      assert.match(problem.detail, /5 redeliveries a minute/);
      await settled(other, 1);
      assert.equal((await redeliver(other)).response.status, 200, "the limit is the run's own");
      await settled(other, 2);
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(receiver.requests.length, delivered + 1, "the refused redelivery sent nothing");
    });

    it("refuses a run that has not ended and a run without a webhook, with 409", async () => {
      const running = await submitAsync(ref, "run", { webhookEndpoint: receiver.url, body: { seconds: 5 } });
      await waitForStatus(ref, running, ["running"]);
      const early = await redeliver(running);
      assert.equal(early.response.status, 409);
      assert.match((early.error as { detail: string }).detail, /is running/);
      const plain = await submitAsync(ref, "run");
      await waitForStatus(ref, plain, ["success"]);
      const none = await redeliver(plain);
      assert.equal(none.response.status, 409);
      assert.match((none.error as { detail: string }).detail, /without a webhookEndpoint/);
    });
  });
}

describe("redeliverWebhook after the result expired", () => {
  it("refuses with 409: the sealed secret went with the result", async () => {
    const t = await startTestServer({
      env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1", RUNPLANE_RESULT_TTL: "1s", RUNPLANE_RUN_LEASE: "3s" },
    });
    const receiver = await startWebhookReceiver();
    after(async () => {
      await receiver.close();
      await t.close();
    });
    await deployApp(t, "hook", { toml: "", files: { "main.py": "def run():\n    return 1\n" } });
    const ref = { client: t.client, project: TEST_PROJECT, app: "hook" };
    const runId = await submitAsync(ref, "run", { webhookEndpoint: receiver.url, webhookSecret: "s3cret" });
    await receiver.waitFor(1);
    // The run's upkeep drops the sealed secret once the result's TTL has passed.
    await eventually(
      async () => {
        const row = await t.server.context.store.db.selectFrom("webhook_deliveries").select(["secret", "status"])
          .where("run_id", "=", runId).executeTakeFirstOrThrow();
        return row.secret === null && row.status === "delivered" ? true : undefined;
      },
      15_000,
      "the sealed secret to be dropped",
    );
    const { response, error } = await t.client.POST(
      "/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/webhook/redeliver",
      { params: { path: { project_id: TEST_PROJECT, app_id: "hook", run_id: runId } } },
    );
    assert.equal(response.status, 409);
    assert.match((error as { detail: string }).detail, /result has expired/);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(receiver.requests.length, 1);
  });
});
