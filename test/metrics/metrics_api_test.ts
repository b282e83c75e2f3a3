import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createTestClient } from "../_helpers/client.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Checks every line against the Prometheus text exposition format and returns the samples. */
function parsePrometheus(text: string): Map<string, number> {
  const samples = new Map<string, number>();
  const metricName = "[a-zA-Z_:][a-zA-Z0-9_:]*";
  // Values as Prometheus reads them (Go's ParseFloat: NaN and ±Inf in any case; prom-client writes an
  // event-loop lag that has no sample yet as `Nan`).
  const sample = new RegExp(
    `^(${metricName}(?:\\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\]|\\\\.)*",?)*\\})?) (-?[0-9.e+-]+|[Nn][Aa][Nn]|[+-][Ii][Nn][Ff])$`,
  );
  for (const line of text.split("\n")) {
    if (line === "") continue;
    if (line.startsWith("# HELP ") || line.startsWith("# TYPE ")) {
      assert.match(line, new RegExp(`^# (HELP|TYPE) ${metricName} `), line);
      continue;
    }
    const match = sample.exec(line);
    assert.ok(match, `not a Prometheus sample line: ${line}`);
    const value = match[2].toLowerCase();
    samples.set(
      match[1],
      value === "nan" ? NaN : value === "+inf" ? Infinity : value === "-inf" ? -Infinity : Number(value),
    );
  }
  return samples;
}

describe("GET /metrics", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  async function scrape(): Promise<Map<string, number>> {
    const { data, response } = await createTestClient(t.url).GET("/metrics", { parseAs: "text" });
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    return parsePrometheus(data as string);
  }

  it("parses as Prometheus text, with process metrics", async () => {
    const samples = await scrape();
    assert.ok(samples.has("process_cpu_user_seconds_total"));
    assert.ok([...samples.keys()].some((k) => k.startsWith("nodejs_heap_size_total_bytes")));
  });

  it("counts requests by operation and status", async () => {
    const key =
      'runplane_http_request_duration_seconds_count{operation_id="createBaseImageHash",method="POST",status="200"}';
    const before = (await scrape()).get(key) ?? 0;
    for (let i = 0; i < 3; i++) {
      await t.client.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
        params: { path: { project_id: TEST_PROJECT, app_id: "m" } },
        body: { aptPackages: [`pkg${i}`] },
      });
    }
    // A request is counted when its response has been flushed, just after the client may have it.
    let after = (await scrape()).get(key);
    for (let i = 0; i < 20 && after !== before + 3; i++) {
      await new Promise((r) => setTimeout(r, 50));
      after = (await scrape()).get(key);
    }
    assert.equal(after, before + 3);
  });
});

describe("GET /metrics with RUNPLANE_METRICS_TOKEN", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_METRICS_TOKEN: "scrape-me" } });
  });
  after(() => t.close());

  it("answers 401 without the token and 200 with it", async () => {
    const denied = await createTestClient(t.url).GET("/metrics", { parseAs: "text" });
    assert.equal(denied.response.status, 401);
    const allowed = await createTestClient(t.url, "scrape-me").GET("/metrics", { parseAs: "text" });
    assert.equal(allowed.response.status, 200);
    assert.ok(!t.rawLogs().includes("scrape-me"), "the metrics token is never logged");
  });
});
