import assert from "node:assert/strict";
import { createHmac, timingSafeEqual } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { eventually, type ReceivedRequest, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Verifies a delivery from the documented rules alone (not the server's signer). */
function verifySignature(request: ReceivedRequest, secret: string, vendor: string): boolean {
  const runId = String(request.headers["x-request-id"]);
  const timestamp = String(request.headers[`x-${vendor}-webhook-timestamp`]);
  const signature = String(request.headers[`x-${vendor}-webhook-signature`]);
  const mac = createHmac("sha256", secret).update(Buffer.concat([Buffer.from(`${runId}.${timestamp}.`), request.body]))
    .digest("hex");
  const expected = Buffer.from(`v1,${mac}`);
  return signature.length === expected.length && timingSafeEqual(Buffer.from(signature), expected);
}

/**
 * A port nothing listens on: 1 (tcpmux), below the range the system hands out for `listen(0)`. A port
 * probed free and closed again was taken by another test's server in between once (CI saw a 404).
 */
function closedPortUrl(): string {
  return "http://127.0.0.1:1/hook";
}

for (const engine of await engines()) {
  describe(`webhook delivery (${engine})`, () => {
    let t: TestServer;
    before(async () => {
      t = await startTestServer({
        engine,
        env: {
          RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1",
          RUNPLANE_WEBHOOK_TIMEOUT: "700ms",
          RUNPLANE_WEBHOOK_RETRY_DELAY: "300ms",
          RUNPLANE_WEBHOOK_HEADER_VENDOR: "Acme",
        },
      });
    });
    after(() => t.close());

    async function finishSyncRun(endpoint: string, secret?: string, result: unknown = { answer: 42 }): Promise<string> {
      const submitted = await t.server.context.runs.submit({
        projectId: TEST_PROJECT,
        app: "hooks",
        functionName: "run",
        mode: "sync",
        input: {},
        webhook: { endpoint, secret },
      });
      assert.equal(submitted.kind, "live");
      if (submitted.kind !== "live") throw new Error("unreachable");
      submitted.run.succeed(result);
      return submitted.run.runId;
    }

    async function settledWebhook(runId: string) {
      return await eventually(
        async () => {
          const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
            params: { path: { project_id: TEST_PROJECT, app_id: "hooks", run_id: runId } },
          });
          return data?.webhook && data.webhook.status !== "pending" ? data.webhook : undefined;
        },
        30_000,
        `webhook of ${runId} to settle`,
      );
    }

    it("signs the exact bytes sent, checked by an independent HMAC over run_id.timestamp.body", async () => {
      const receiver = await startWebhookReceiver();
      after(() => receiver.close());
      const runId = await finishSyncRun(receiver.url, "s3cret-value", { text: "héllo", n: [1, 2] });
      await receiver.waitFor(1);
      const [request] = receiver.requests;
      assert.equal(request.headers["x-request-id"], runId);
      assert.equal(request.headers["content-type"], "application/json");
      assert.match(String(request.headers["x-acme-webhook-timestamp"]), /^\d{10}$/);
      assert.ok(Math.abs(Number(request.headers["x-acme-webhook-timestamp"]) - Date.now() / 1000) < 60);
      assert.ok(verifySignature(request, "s3cret-value", "acme"), "signature must verify with the secret");
      assert.ok(!verifySignature(request, "another-secret", "acme"), "signature must not verify with another secret");
      const body = JSON.parse(request.body.toString("utf8"));
      assert.deepEqual(body.result, { text: "héllo", n: [1, 2] });
      assert.equal(body.run_id, runId);
      assert.equal(body.status, "success");
      const webhook = await settledWebhook(runId);
      assert.equal(webhook.status, "delivered");
      assert.ok(!t.rawLogs().includes("s3cret-value"), "the secret must never be logged");
    });

    it("sends no signature headers without a secret", async () => {
      const receiver = await startWebhookReceiver();
      after(() => receiver.close());
      await finishSyncRun(receiver.url);
      await receiver.waitFor(1);
      assert.equal(receiver.requests[0].headers["x-acme-webhook-signature"], undefined);
      assert.equal(receiver.requests[0].headers["x-acme-webhook-timestamp"], undefined);
    });

    const table: Array<
      { name: string; answers: Array<number | "hang">; attempts: number; status: "delivered" | "failed" }
    > = [
      { name: "404, 404, 200 → 3 attempts, delivered", answers: [404, 404, 200], attempts: 3, status: "delivered" },
      { name: "400 → 1 attempt, failed", answers: [400], attempts: 1, status: "failed" },
      { name: "500 → 1 attempt, failed", answers: [500], attempts: 1, status: "failed" },
      { name: "302 → 3 attempts, redirect never followed", answers: [302, 302, 302], attempts: 3, status: "failed" },
      {
        name: "a receiver hanging past the timeout → retried",
        answers: ["hang", "hang", 200],
        attempts: 3,
        status: "delivered",
      },
    ];
    for (const row of table) {
      it(`retry table: ${row.name}`, async () => {
        const receiver = await startWebhookReceiver((n) => row.answers[n - 1] ?? 200);
        after(() => receiver.close());
        const runId = await finishSyncRun(receiver.url, "k");
        const webhook = await settledWebhook(runId);
        assert.equal(webhook.status, row.status);
        assert.deepEqual(webhook.attempts.map((a) => a.attempt), Array.from({ length: row.attempts }, (_, i) => i + 1));
        assert.equal(receiver.requests.length, row.attempts);
        assert.ok(receiver.requests.every((r) => r.url === "/hook"), "no request may follow a redirect");
        for (const [i, attempt] of webhook.attempts.entries()) {
          const answer = row.answers[i];
          assert.ok(Number.isFinite(attempt.duration_ms), `duration_ms ${attempt.duration_ms} is a number`);
          if (answer === "hang") {
            assert.equal(attempt.status_code, null);
            assert.match(attempt.error ?? "", /timed out/);
            // Cut off by RUNPLANE_WEBHOOK_TIMEOUT=700ms: it lasted about that long, not less.
            assert.ok(attempt.duration_ms >= 600, `a timed-out attempt took ${attempt.duration_ms} ms`);
          } else assert.equal(attempt.status_code, answer);
        }
        for (let i = 1; i < receiver.requests.length; i++) {
          const gap = receiver.requests[i].at - receiver.requests[i - 1].at;
          assert.ok(
            gap <= 5_000 + (row.answers[i - 1] === "hang" ? 700 : 0),
            `gap ${gap} ms between attempts must be at most 5 s`,
          );
        }
        // No fourth attempt arrives later.
        await new Promise((resolve) => setTimeout(resolve, 800));
        assert.equal(receiver.requests.length, row.attempts);
      });
    }

    it("retry table: a closed port → 3 attempts with the error recorded, caller unaffected", async () => {
      const runId = await finishSyncRun(closedPortUrl(), "k");
      const webhook = await settledWebhook(runId);
      assert.equal(webhook.status, "failed");
      assert.equal(webhook.attempts.length, 3);
      for (const attempt of webhook.attempts) {
        assert.equal(attempt.status_code, null);
        assert.match(attempt.error ?? "", /ECONNREFUSED/);
        // Refused at once: a non-negative number of milliseconds, well under the 700 ms timeout.
        assert.ok(
          Number.isFinite(attempt.duration_ms) && attempt.duration_ms >= 0 && attempt.duration_ms < 700,
          `a refused attempt took ${attempt.duration_ms} ms`,
        );
      }
      const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: { path: { project_id: TEST_PROJECT, app_id: "hooks", run_id: runId } },
      });
      assert.deepEqual(data?.result, { answer: 42 });
      assert.ok(t.logs.some((l) => l.msg === "webhook delivery failed" && l.run_id === runId));
    });
  });
}
