import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { components } from "../../generated/api.d.ts";
import { ROOT } from "../../scripts/generate.ts";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";

// The app raises from a module in a sub-folder, through a chained exception: every frame of the app, and
// only those, is expected, named relative to the app's folder.
const MAIN = `
from lib.checks import check

def boom():
    try:
        check(-1)
    except KeyError as error:
        raise ValueError("bad value") from error

def stream():
    yield "one"
    check(-1)
`;
const CHECKS = `
def check(value):
    if value < 0:
        raise KeyError("negative")
    return value
`;

type RunError = components["schemas"]["RunError"];

/** Fails with what is wrong with `traceback`: the platform's frame or a server path in it, or an app frame missing. */
function assertAppFramesOnly(traceback: string | null | undefined, options: { dataDir: string }): void {
  assert.ok(traceback, "a traceback");
  assert.doesNotMatch(traceback, /_worker\.py/, "the worker harness's own frame");
  assert.ok(!traceback.includes(options.dataDir), `the data dir's path is in:\n${traceback}`);
  assert.ok(!traceback.includes(ROOT), `the checkout's path is in:\n${traceback}`);
  assert.doesNotMatch(traceback, /File "\//, "an absolute path");
  assert.match(traceback, /File "lib\/checks\.py", line 4, in check\n/);
  assert.match(traceback, /File "main\.py", line \d+, in (boom|stream)\n/);
}

describe("a raising function's error, as the API, the store and the webhook show it", () => {
  let t: TestServer;
  let receiver: WebhookReceiver;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    receiver = await startWebhookReceiver();
    // The helpers' sub-folder first: deployApp writes files, not folders.
    await mkdir(join(t.server.context.config.appsDir, TEST_PROJECT, "tb", "lib"), { recursive: true });
    await deployApp(t, "tb", { toml: "", files: { "main.py": MAIN, "lib/__init__.py": "", "lib/checks.py": CHECKS } });
  });
  after(async () => {
    await receiver?.close();
    await t?.close();
  });

  async function call(fn: string, query = "") {
    return await fetch(`${t.url}/v4/${TEST_PROJECT}/tb/${fn}${query}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
  }

  async function record(runId: string): Promise<RunError | null> {
    const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}", {
      params: { path: { project_id: TEST_PROJECT, app_id: "tb", run_id: runId } },
    });
    return data?.error ?? null;
  }

  it("answers a problem whose detail says the type once, with the app's frames only", async () => {
    const response = await call("boom");
    assert.equal(response.status, 500);
    const problem = await response.json() as { detail: string; exception_type: string; traceback: string };
    assert.equal(problem.detail, "ValueError: bad value");
    assert.equal(problem.exception_type, "ValueError");
    assertAppFramesOnly(problem.traceback, t);
    assert.match(problem.traceback, /KeyError: 'negative'\n\nThe above exception was the direct cause/);
    assert.match(problem.traceback, /ValueError: bad value\n$/);
  });

  it("stores the type and the message apart, and the same traceback", async () => {
    const response = await call("boom");
    const runId = response.headers.get("x-request-id")!;
    await t.server.context.runs.flush();
    const error = await record(runId);
    assert.equal(error?.type, "ValueError");
    assert.equal(error?.message, "bad value");
    assertAppFramesOnly(error?.traceback, t);
  });

  it("sends the webhook the same error", async () => {
    const response = await call("boom", `?async=true&webhookEndpoint=${encodeURIComponent(receiver.url)}`);
    assert.equal(response.status, 202);
    await receiver.waitFor(1);
    const body = JSON.parse(receiver.requests[0].body.toString("utf8")) as { status: string; error: RunError };
    assert.equal(body.status, "failure");
    assert.equal(body.error.type, "ValueError");
    assert.equal(body.error.message, "bad value");
    assertAppFramesOnly(body.error.traceback, t);
  });

  it("ends a failing stream with an error event of the app's frames only, and stores it so", async () => {
    const response = await call("stream");
    const runId = response.headers.get("x-request-id")!;
    const text = await response.text();
    const data = /event: error\ndata: (.*)\n/.exec(text)?.[1];
    assert.ok(data, text);
    const problem = JSON.parse(data) as { detail: string; traceback: string };
    assert.equal(problem.detail, "KeyError: 'negative'");
    assertAppFramesOnly(problem.traceback, t);
    await waitFor(async () => (await record(runId)) !== null, "the stream's record");
    const error = await record(runId);
    assert.equal(error?.message, "'negative'");
    assertAppFramesOnly(error?.traceback, t);
  });
});
