import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { createTestClient } from "../_helpers/client.ts";
import { type AppRef, callRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

/** The samples of a Prometheus text exposition, by full series name (the format itself is checked in metrics_api_test). */
function samples(text: string): Map<string, number> {
  const found = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    found.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return found;
}

describe("run and webhook metrics and logs", () => {
  let t: TestServer;
  let receiver: WebhookReceiver;
  let ref: AppRef;
  const APP = `${TEST_PROJECT}/m`;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    receiver = await startWebhookReceiver();
    ref = { client: t.client, project: TEST_PROJECT, app: "m" };
    await deployApp(t, "m", {
      toml: `[deployment]\nname = "m"\n\n[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\n`,
      files: {
        "main.py":
          "import time\n\ndef add(a, b):\n    return a + b\n\ndef nap(seconds):\n    time.sleep(seconds)\n    return 'rested'\n",
      },
    });
  });
  after(async () => {
    await t.close();
    await receiver.close();
  });

  async function scrape(): Promise<Map<string, number>> {
    const { data, response } = await createTestClient(t.url).GET("/metrics", { parseAs: "text" });
    assert.equal(response.status, 200);
    return samples(data as string);
  }

  /** Waits until `series` reads `value` (metrics are recorded just after the response). */
  async function expectSample(series: string, value: number): Promise<void> {
    let last: number | undefined;
    await waitFor(
      async () => (last = (await scrape()).get(series) ?? 0) === value,
      `${series} to be ${value} (last ${last})`,
      10_000,
    );
  }

  it("counts a sync call's start, end and duration, and logs its start and end once", async () => {
    const before = await scrape();
    const key = (name: string, labels: string) => `${name}{${labels}}`;
    const started = key("runplane_runs_started_total", `app="${APP}",mode="sync"`);
    const finished = key("runplane_runs_finished_total", `app="${APP}",mode="sync",status="success"`);
    const duration = key("runplane_run_duration_seconds_count", `app="${APP}",mode="sync",status="success"`);
    const { data } = await callRun(ref, "add", { body: { a: 1, b: 2 } });
    const runId = (data as { run_id: string }).run_id;
    await expectSample(started, (before.get(started) ?? 0) + 1);
    await expectSample(finished, (before.get(finished) ?? 0) + 1);
    await expectSample(duration, (before.get(duration) ?? 0) + 1);
    const lines = t.logs.filter((l) => l.run_id === runId);
    assert.equal(lines.filter((l) => l.msg === "run started").length, 1);
    const end = lines.filter((l) => l.msg === "run finished");
    assert.equal(end.length, 1);
    assert.equal(end[0].app, APP);
    assert.equal(end[0].status, "success");
    assert.equal(typeof end[0].duration_ms, "number");
  });

  it("counts an async run's start, end and queue time, and shows queued runs and busy replicas in the gauges", async () => {
    const before = await scrape();
    const started = `runplane_runs_started_total{app="${APP}",mode="async"}`;
    const finished = `runplane_runs_finished_total{app="${APP}",mode="async",status="success"}`;
    const queueTime = `runplane_run_queue_time_seconds_count{app="${APP}",mode="async"}`;
    const first = await submitAsync(ref, "nap", { body: { seconds: 2 } });
    const second = await submitAsync(ref, "nap", { body: { seconds: 0 } });
    await waitForStatus(ref, first, ["running"]);
    // One slot: the second run waits while the first one keeps the only replica busy.
    await expectSample(`runplane_runs_queued{app="${APP}"}`, 1);
    await expectSample(`runplane_replicas{app="${APP}",state="busy"}`, 1);
    await waitForStatus(ref, second, ["success"]);
    await expectSample(started, (before.get(started) ?? 0) + 2);
    await expectSample(finished, (before.get(finished) ?? 0) + 2);
    await expectSample(queueTime, (before.get(queueTime) ?? 0) + 2);
    await expectSample(`runplane_replicas{app="${APP}",state="idle"}`, 1);
    assert.equal((await scrape()).get(`runplane_runs_queued{app="${APP}"}`) ?? 0, 0);
  });

  it("counts a webhook attempt by outcome and its delivery latency, and logs the attempt without the secret", async () => {
    const before = await scrape();
    const attempts = 'runplane_webhook_attempts_total{outcome="delivered"}';
    const latency = 'runplane_webhook_delivery_latency_seconds_count{outcome="delivered"}';
    const { data } = await callRun(ref, "add", {
      body: { a: 2, b: 2 },
      webhookEndpoint: receiver.url,
      webhookSecret: "do-not-log-me",
    });
    const runId = (data as { run_id: string }).run_id;
    await receiver.waitFor(1);
    await expectSample(attempts, (before.get(attempts) ?? 0) + 1);
    await expectSample(latency, (before.get(latency) ?? 0) + 1);
    const attempt = t.logs.find((l) => l.run_id === runId && l.msg === "webhook delivered");
    assert.equal(attempt?.outcome, "delivered");
    assert.equal(attempt?.statusCode, 200);
    assert.ok(!t.rawLogs().includes("do-not-log-me"), "the webhook secret is never logged");
  });
});
