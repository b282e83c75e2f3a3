import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { cancelRun, getRun, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

// Each function waits for the test to cancel it (its run) or close the stream: nothing is written first.
const MAIN = `import time

def silent():
    time.sleep(3600)

def late():
    time.sleep(3600)
    yield "never"
`;

// The heartbeat is an hour: before headers were flushed, they left only with the first ping or event,
// so these tests waited for ever (and failed at the test's limit).
describe("an event stream sends its headers at once, before its first event", { timeout: 60_000 }, () => {
  let t: TestServer;
  const ref = () => ({ client: t.client, project: TEST_PROJECT, app: "quiet" });

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_SSE_HEARTBEAT: "3600" } });
    await deployApp(t, "quiet", { toml: "[scaling]\nmax_replicas = 2\n", files: { "main.py": MAIN } });
  });
  after(() => t?.close());

  it("following a running run that has printed nothing answers 200 text/event-stream at once", async () => {
    const runId = await submitAsync(ref(), "silent");
    await waitForStatus(ref(), runId, ["running"]);
    const controller = new AbortController();
    const response = await checkedFetch(`${t.url}/v4/projects/${TEST_PROJECT}/apps/quiet/runs/${runId}/logs`, {
      headers: { Authorization: `Bearer ${t.token}`, Accept: "text/event-stream" },
      signal: controller.signal,
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    assert.equal(response.headers.get("x-request-id")?.startsWith("req_"), true);
    const { data: run } = await getRun(ref(), runId);
    assert.equal(run?.status, "running", "the headers came while the run still ran, silent");
    controller.abort();
    await cancelRun(ref(), runId);
  });

  it("a streaming call answers 200 with its run id before the function yields anything", async () => {
    const controller = new AbortController();
    const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/quiet/late`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json", Accept: "text/event-stream" },
      body: "{}",
      signal: controller.signal,
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    const runId = response.headers.get("x-request-id")!;
    assert.match(runId, /^run_/);
    controller.abort();
    // Its reader gone, the run ends cancelled.
    await waitForStatus(ref(), runId, ["cancelled"]);
  });
});
