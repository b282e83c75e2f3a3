import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { once } from "node:events";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { verifyWebhook } from "../../client/webhook_verifier.ts";
import { deployApp } from "../_helpers/apps.ts";
import { createCheckedRunplaneClient } from "../_helpers/runplane_client.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { type ReceivedRequest, startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

const SECRET = "whsec_test_secret";
const RUN_ID = "run_0123456789abcdefghijklmnop";
const BODY = JSON.stringify({
  run_id: RUN_ID,
  status: "success",
  result: { n: 1 },
  error: null,
  run_time_ms: 3.5,
  timestamp: "2026-01-01T00:00:00.000Z",
});

/** The signature computed independently of the client, with node:crypto. */
function sign(secret: string, runId: string, timestamp: number, body: string): string {
  return `v1,${createHmac("sha256", secret).update(`${runId}.${timestamp}.${body}`).digest("hex")}`;
}

function delivery(options: { secret?: string; timestamp?: number; body?: string; vendor?: string } = {}) {
  const timestamp = options.timestamp ?? Math.floor(Date.now() / 1000);
  const vendor = options.vendor ?? "Runplane";
  return {
    "X-Request-Id": RUN_ID,
    [`X-${vendor}-Webhook-Timestamp`]: String(timestamp),
    [`X-${vendor}-Webhook-Signature`]: sign(options.secret ?? SECRET, RUN_ID, timestamp, options.body ?? BODY),
    "Content-Type": "application/json",
  };
}

describe("verifyWebhook", () => {
  it("accepts a correctly signed delivery given headers and raw bytes", async () => {
    const outcome = await verifyWebhook({ secret: SECRET, headers: delivery(), body: new TextEncoder().encode(BODY) });
    assert.equal(outcome.valid, true);
    assert.equal(outcome.runId, RUN_ID);
  });

  it("accepts a web Request and leaves its body readable", async () => {
    const request = new Request("http://localhost/hook", { method: "POST", headers: delivery(), body: BODY });
    assert.deepEqual((await verifyWebhook({ secret: SECRET, request })).valid, true);
    assert.equal(await request.text(), BODY);
  });

  it("accepts a Node IncomingMessage with its raw body, over a real socket", async () => {
    const server = createServer();
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const received = once(server, "request") as Promise<[IncomingMessage, import("node:http").ServerResponse]>;
    const sent = fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
      method: "POST",
      headers: delivery(),
      body: BODY,
    });
    const [request, response] = await received;
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const outcome = await verifyWebhook({ secret: SECRET, request, body: Buffer.concat(chunks) });
    response.end();
    await (await sent).text();
    server.close();
    assert.equal(outcome.valid, true);
  });

  it("rejects a changed body", async () => {
    const outcome = await verifyWebhook({ secret: SECRET, headers: delivery(), body: BODY.replace('"n":1', '"n":2') });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /does not match/);
  });

  it("rejects a wrong secret", async () => {
    const outcome = await verifyWebhook({ secret: SECRET, headers: delivery({ secret: "another" }), body: BODY });
    assert.equal(outcome.valid, false);
  });

  it("rejects a stale timestamp even with a valid signature", async () => {
    const stale = Math.floor(Date.now() / 1000) - 301;
    const outcome = await verifyWebhook({ secret: SECRET, headers: delivery({ timestamp: stale }), body: BODY });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /old, beyond the 300 s tolerance/);
    const lenient = await verifyWebhook({
      secret: SECRET,
      headers: delivery({ timestamp: stale }),
      body: BODY,
      toleranceSeconds: 600,
    });
    assert.equal(lenient.valid, true);
  });

  it("rejects a timestamp far in the future", async () => {
    const future = Math.floor(Date.now() / 1000) + 3600;
    const outcome = await verifyWebhook({ secret: SECRET, headers: delivery({ timestamp: future }), body: BODY });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /in the future/);
  });

  it("rejects a delivery whose run id header was changed", async () => {
    const headers = { ...delivery(), "X-Request-Id": "run_zzzzzzzzzzzzzzzzzzzzzzzzzz" };
    assert.equal((await verifyWebhook({ secret: SECRET, headers, body: BODY })).valid, false);
  });

  it("says which header is missing", async () => {
    const { "X-Runplane-Webhook-Signature": _, ...unsigned } = delivery();
    const outcome = await verifyWebhook({ secret: SECRET, headers: unsigned, body: BODY });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /X-Runplane-Webhook-Signature header has no v1 signature/);
  });

  it("reads the headers of a configured vendor word", async () => {
    const headers = delivery({ vendor: "Acme" });
    assert.equal((await verifyWebhook({ secret: SECRET, headers, body: BODY, vendor: "Acme" })).valid, true);
    assert.equal((await verifyWebhook({ secret: SECRET, headers, body: BODY })).valid, false);
  });

  it("accepts when any of several signatures matches (secret rotation)", async () => {
    const headers = delivery();
    const rotated = {
      ...headers,
      "X-Runplane-Webhook-Signature": `${sign("old", RUN_ID, Number(headers["X-Runplane-Webhook-Timestamp"]), BODY)} ${
        headers["X-Runplane-Webhook-Signature"]
      }`,
    };
    assert.equal((await verifyWebhook({ secret: SECRET, headers: rotated, body: BODY })).valid, true);
  });
});

describe("verifyWebhook on a real delivery from the server", { timeout: 120_000 }, () => {
  const secret = "whsec_real_delivery";
  let t: TestServer;
  let receiver: WebhookReceiver;
  let delivery: ReceivedRequest;
  let runId: string;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    receiver = await startWebhookReceiver();
    await deployApp(t, "hooked", {
      toml: "[scaling]\nmax_replicas = 1\nresponse_grace_period = 60\n",
      files: { "main.py": 'def run(name):\n    return {"greeting": f"Hello, {name}!"}\n' },
    });
    const client = createCheckedRunplaneClient(t.url, t.token);
    runId = await client.runAsync(`${TEST_PROJECT}/hooked`, { name: "Ada" }, {
      webhookEndpoint: receiver.url,
      webhookSecret: secret,
    });
    await receiver.waitFor(1, 60_000);
    delivery = receiver.requests[0];
  });
  after(async () => {
    await receiver.close();
    await t.close();
  });

  it("accepts the delivery as received: headers and raw body", async () => {
    const outcome = await verifyWebhook({ secret, headers: delivery.headers, body: delivery.body });
    assert.deepEqual(outcome, {
      valid: true,
      runId,
      timestamp: Number(delivery.headers["x-runplane-webhook-timestamp"]),
    });
    const body = JSON.parse(delivery.body.toString("utf8")) as { run_id: string; status: string; result: unknown };
    assert.deepEqual([body.run_id, body.status, body.result], [runId, "success", { greeting: "Hello, Ada!" }]);
  });

  it("accepts the delivery rebuilt as a web Request", async () => {
    const request = new Request(`http://127.0.0.1${delivery.url}`, {
      method: "POST",
      headers: delivery.headers as Record<string, string>,
      body: new Uint8Array(delivery.body),
    });
    assert.equal((await verifyWebhook({ secret, request })).valid, true);
  });

  it("rejects the same delivery with a changed body", async () => {
    const changed = Buffer.from(delivery.body.toString("utf8").replace("Ada", "Eve"));
    assert.notDeepEqual(changed, delivery.body);
    const outcome = await verifyWebhook({ secret, headers: delivery.headers, body: changed });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /does not match/);
  });

  it("rejects the same delivery with a wrong secret", async () => {
    const outcome = await verifyWebhook({ secret: "not-the-secret", headers: delivery.headers, body: delivery.body });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /does not match/);
  });

  it("rejects the same delivery replayed after the tolerance", async () => {
    const signedAt = Number(delivery.headers["x-runplane-webhook-timestamp"]) * 1000;
    const outcome = await verifyWebhook({
      secret,
      headers: delivery.headers,
      body: delivery.body,
      now: signedAt + 301_000,
    });
    assert.equal(outcome.valid, false);
    assert.match(outcome.valid ? "" : outcome.reason, /301 s old, beyond the 300 s tolerance/);
  });
});
