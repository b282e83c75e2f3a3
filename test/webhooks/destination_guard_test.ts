import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { ProblemError } from "../../server/problems/mod.ts";
import { forbiddenAddressReason } from "../../server/webhooks/mod.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually, startWebhookReceiver } from "../_helpers/webhook_receiver.ts";

describe("webhook destination guard (on by default)", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_RETRY_DELAY: "200ms" } });
  });
  after(() => t.close());

  function submit(endpoint: string) {
    return t.server.context.runs.submit({
      projectId: TEST_PROJECT,
      app: "guard",
      functionName: "run",
      mode: "async",
      input: {},
      webhook: { endpoint },
    });
  }

  for (
    const endpoint of [
      "http://127.0.0.1/hook",
      "http://10.0.0.1/hook",
      "http://169.254.169.254/latest/meta-data",
      "http://[::1]:8080/",
      "ftp://example.com/hook",
      "http://[::ffff:7f00:1]/",
      "http://100.64.0.1/",
      "http://0.0.0.0/",
      "http://[::127.0.0.1]/",
      "http://[::a9fe:a9fe]/",
      "http://[::a00:1]/",
      "http://[64:ff9b::7f00:1]/",
      "http://[2002:a9fe:a9fe::1]/",
      "http://[2001:db8::1]/",
      "http://0x7f.1/",
      "not a url",
    ]
  ) {
    it(`refuses ${endpoint} at submit with a 400 problem naming the parameter`, async () => {
      await assert.rejects(submit(endpoint), (error: unknown) => {
        assert.ok(error instanceof ProblemError);
        assert.equal(error.status, 400);
        assert.equal(error.options.errors?.[0].path, "query.webhookEndpoint");
        return true;
      });
    });
  }

  it("accepts a public address and a host name at submit", async () => {
    assert.equal((await submit("https://93.184.215.14/hook")).kind, "accepted");
    assert.equal((await submit("https://hooks.example.com/x")).kind, "accepted");
  });

  it("classifies ranges: public unicast allowed, the rest refused", () => {
    assert.equal(forbiddenAddressReason("8.8.8.8"), null);
    assert.equal(forbiddenAddressReason("2606:4700::1111"), null);
    // a notation that carries a public IPv4 address is judged as that address
    assert.equal(forbiddenAddressReason("::ffff:8.8.8.8"), null);
    assert.equal(forbiddenAddressReason("64:ff9b::8.8.8.8"), null);
    assert.equal(forbiddenAddressReason("2002:808:808::1"), null);
    assert.match(forbiddenAddressReason("::7f00:1") ?? "", /IPv4-compatible/);
    assert.match(
      forbiddenAddressReason("2002:a9fe:a9fe::") ?? "",
      /6to4 for 169\.254\.169\.254 which is a cloud metadata/,
    );
    for (
      const address of [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "224.0.0.1",
        "0.0.0.0",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:10.0.0.1",
        // IPv4-compatible (deprecated), whatever it carries
        "::127.0.0.1",
        "::a9fe:a9fe",
        "::a00:1",
        "::8.8.8.8",
        // IPv4-mapped, NAT64 and 6to4 carrying a private, loopback or metadata address
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "64:ff9b::10.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2002:7f00:1::1",
        "2002:c0a8:101::",
        // IPv4-translated, local-use NAT64, Teredo, documentation, benchmarking, ORCHID, discard, reserved
        "::ffff:0:7f00:1",
        "64:ff9b:1::8.8.8.8",
        "2001::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "2001:db8::1",
        "3fff::1",
        "2001:2::1",
        "2001:20::1",
        "100::1",
        "4000::1",
        "fec0::1",
        "fe80::1%eth0",
        // IPv4 special ranges
        "192.0.2.1",
        "198.18.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "100.100.100.200",
      ]
    ) {
      assert.notEqual(forbiddenAddressReason(address), null, `${address} must be refused`);
    }
  });

  it("refuses at delivery a host name that resolves to loopback: 1 attempt, failed, nothing sent", async () => {
    const receiver = await startWebhookReceiver();
    after(() => receiver.close());
    const port = new URL(receiver.url).port;
    const submitted = await t.server.context.runs.submit({
      projectId: TEST_PROJECT,
      app: "guard",
      functionName: "run",
      mode: "sync",
      input: {},
      webhook: { endpoint: `http://localhost:${port}/hook`, secret: "x" },
    });
    assert.equal(submitted.kind, "live");
    if (submitted.kind !== "live") return;
    submitted.run.succeed(1);
    const webhook = await eventually(async () => {
      const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
        params: { path: { project_id: TEST_PROJECT, app_id: "guard", run_id: submitted.run.runId } },
      });
      return data?.webhook?.status === "pending" ? undefined : data?.webhook;
    });
    assert.equal(webhook?.status, "failed");
    assert.equal(webhook?.attempts.length, 1);
    assert.match(webhook?.attempts[0].error ?? "", /destination refused: localhost resolves to/);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(receiver.requests.length, 0);
  });
});
