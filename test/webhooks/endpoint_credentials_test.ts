import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { basicAuthorization, takeEndpointCredentials } from "../../server/webhooks/mod.ts";
import { deployApp } from "../_helpers/apps.ts";
import { type AppRef, callRun, getRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually, startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

const USER = "hook user";
const PASSWORD = "pa:ss@wörd";

function withCredentials(url: string): string {
  const parsed = new URL(url);
  parsed.username = encodeURIComponent(USER);
  parsed.password = encodeURIComponent(PASSWORD);
  return parsed.href;
}

/** Every byte of the store's files (database, WAL, shared memory). */
function storeBytes(dataDir: string): Buffer {
  return Buffer.concat(
    readdirSync(dataDir).filter((name) => name.startsWith("runplane.sqlite3")).map((name) =>
      readFileSync(join(dataDir, name))
    ),
  );
}

describe("webhook endpoint credentials", () => {
  let t: TestServer;
  let receiver: WebhookReceiver;
  const ref = (): AppRef => ({ client: t.client, project: TEST_PROJECT, app: "creds" });
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    await deployApp(t, "creds", {
      toml: `[deployment]\nname = "creds"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 2\n`,
      files: { "main.py": "import time\n\ndef run(seconds=0):\n    time.sleep(seconds)\n    return {'ok': True}\n" },
    });
    receiver = await startWebhookReceiver();
  });
  after(async () => {
    await receiver.close();
    await t.close();
  });

  it("takes user information out of a URL, percent-decoded", () => {
    const url = new URL("https://a%20b:c%3Ad%40e@example.com/hook?x=1");
    assert.equal(takeEndpointCredentials(url), "a b:c:d@e");
    assert.equal(url.href, "https://example.com/hook?x=1");
    assert.equal(takeEndpointCredentials(new URL("https://example.com/")), null);
    assert.equal(takeEndpointCredentials(new URL("https://only-user@example.com/")), "only-user:");
    assert.equal(basicAuthorization("a b:c:d@e"), `Basic ${Buffer.from("a b:c:d@e").toString("base64")}`);
  });

  it("a sync call: the endpoint is shown and stored without them, the delivery sends Basic auth", async () => {
    const endpoint = withCredentials(receiver.url);
    const { data, response } = await callRun(ref(), "run", { webhookEndpoint: endpoint, webhookSecret: "s3cret" });
    assert.equal(response.status, 200);
    const runId = (data as { run_id: string }).run_id;
    const before = receiver.requests.length;
    await receiver.waitFor(before + 1);
    const request = receiver.requests.find((r) => r.headers["x-request-id"] === runId);
    assert.ok(request, "the delivery arrived");
    const expected = `Basic ${Buffer.from(`${USER}:${PASSWORD}`, "utf8").toString("base64")}`;
    assert.equal(request.headers.authorization, expected);

    const webhook = await eventually(async () => {
      const { data: run } = await getRun(ref(), runId);
      return run?.webhook?.status === "delivered" ? run.webhook : undefined;
    });
    assert.equal(webhook?.endpoint, receiver.url);
    const { data: shown } = await getRun(ref(), runId);
    const text = JSON.stringify(shown);
    for (const form of ["hook%20user", "hook user", "pa%3Ass", "pa:ss"]) assert.ok(!text.includes(form), text);

    const db = t.server.context.store.db;
    const run = await db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirstOrThrow();
    assert.equal(run.webhook_endpoint, receiver.url);
    assert.equal(run.webhook_credentials, null);
    const delivery = await db.selectFrom("webhook_deliveries").selectAll().where("run_id", "=", runId)
      .executeTakeFirstOrThrow();
    assert.equal(delivery.endpoint, receiver.url);
    // Kept sealed for a redelivery until the run's result expires (redelivery_test.ts), never in clear.
    assert.ok(delivery.credentials && !delivery.credentials.includes("pa:ss"), "sealed, not in clear");
    assert.equal(t.server.context.secrets.open(delivery.credentials), `${USER}:${PASSWORD}`);
  });

  it("an async call keeps them sealed while it waits, then drops them", async () => {
    const runId = await submitAsync(ref(), "run", {
      webhookEndpoint: withCredentials(receiver.url),
      body: { seconds: 1 },
    });
    const db = t.server.context.store.db;
    const queued = await db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirstOrThrow();
    assert.equal(queued.webhook_endpoint, receiver.url);
    assert.match(queued.webhook_credentials ?? "", /^v1\./);
    assert.equal(t.server.context.secrets.open(queued.webhook_credentials!), `${USER}:${PASSWORD}`);
    const { data: shown } = await getRun(ref(), runId);
    assert.equal(shown?.webhook?.endpoint, receiver.url);

    await waitForStatus(ref(), runId, ["success"]);
    await eventually(async () => receiver.requests.find((r) => r.headers["x-request-id"] === runId));
    const request = receiver.requests.find((r) => r.headers["x-request-id"] === runId)!;
    assert.equal(request.headers.authorization, `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString("base64")}`);
    const ended = await db.selectFrom("runs").selectAll().where("run_id", "=", runId).executeTakeFirstOrThrow();
    assert.equal(ended.webhook_credentials, null);
  });

  it("no file of the store holds the password in any form", async () => {
    await t.server.context.runs.flush();
    const bytes = storeBytes(t.dataDir);
    for (const form of [PASSWORD, encodeURIComponent(PASSWORD), "pa:ss", "pa%3Ass"]) {
      assert.equal(bytes.indexOf(Buffer.from(form)), -1, `${form} must not be stored`);
    }
  });
});
