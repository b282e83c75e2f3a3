import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { followEvents } from "../_helpers/event_reader.ts";
import { engines } from "../_helpers/postgres.ts";
import { type AppRef, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const MAIN = `import logging, sys, time

def run(n=3, pause=0):
    print("first line")
    sys.stderr.write("to stderr\\n")
    logging.warning("a logging record")
    for i in range(n):
        print(f"line {i}", flush=True)
        time.sleep(pause)
    return {"done": True}

def chatty(n=5000):
    for i in range(n):
        print(f"chatty {i:05d} " + "x" * 100)
    return n
`;

type Log = { lines: Array<{ at: string; stream: string; text: string }>; truncated: boolean };

for (const engine of await engines()) {
  describe(`run logs (${engine})`, () => {
    let t: TestServer;
    let ref: AppRef;

    before(async () => {
      t = await startTestServer({ engine, env: { RUNPLANE_RUN_LOG_LIMIT: "64kb" } });
      await deployApp(t, "talk", { toml: "", files: { "main.py": MAIN } });
      ref = { client: t.client, project: TEST_PROJECT, app: "talk" };
    });
    after(() => t?.close());

    function logsOf(runId: string, app = "talk", project = TEST_PROJECT) {
      return t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
        params: { path: { project_id: project, app_id: app, run_id: runId } },
      });
    }

    it("keeps a run's stdout, stderr and logging lines, in order, with their stream and time", async () => {
      const runId = await submitAsync(ref, "run");
      await waitForStatus(ref, runId, ["success"]);
      const { data, response } = await logsOf(runId);
      assert.equal(response.status, 200);
      const log = data as Log;
      assert.deepEqual(log.lines.map((l) => [l.stream, l.text]), [
        ["stdout", "first line"],
        ["stderr", "to stderr"],
        ["stderr", "WARNING:root:a logging record"],
        ["stdout", "line 0"],
        ["stdout", "line 1"],
        ["stdout", "line 2"],
      ]);
      assert.equal(log.truncated, false);
      assert.ok(log.lines.every((l) => Math.abs(Date.parse(l.at) - Date.now()) < 60_000));
    });

    it("keeps the tail past RUNPLANE_RUN_LOG_LIMIT and says truncated", async () => {
      const runId = await submitAsync(ref, "chatty");
      await waitForStatus(ref, runId, ["success"]);
      const log = (await logsOf(runId)).data as Log;
      assert.equal(log.truncated, true);
      assert.equal(log.lines.at(-1)?.text.startsWith("chatty 04999 "), true);
      const bytes = log.lines.reduce((n, l) => n + Buffer.byteLength(l.text) + 32, 0);
      assert.ok(bytes <= 64 * 1024 && bytes > 32 * 1024, `kept ${bytes} bytes`);
      assert.ok(!log.lines.some((l) => l.text.startsWith("chatty 00000 ")));
    });

    it("follows a running run's lines over SSE and ends with its status", async () => {
      const runId = await submitAsync(ref, "run", { body: { n: 4, pause: 0.4 } });
      await waitForStatus(ref, runId, ["running"]);
      const feed = await followEvents(`${t.url}/v4/projects/${TEST_PROJECT}/apps/talk/runs/${runId}/logs`, {
        Authorization: `Bearer ${t.token}`,
      });
      try {
        const firstLine = await feed.waitFor((e) => e.data.includes("line 0"));
        const end = await feed.waitFor((e) => e.event === "end", 20_000);
        assert.ok(feed.events.indexOf(firstLine) < feed.events.indexOf(end));
        assert.deepEqual(JSON.parse(end.data), { status: "success" });
        const texts = feed.events.filter((e) => e.event === "message").map((e) => JSON.parse(e.data).text);
        assert.deepEqual(texts.slice(-4), ["line 0", "line 1", "line 2", "line 3"]);
      } finally {
        feed.stop();
      }
    });

    it("answers 404 for a run of another app or project", async () => {
      const runId = await submitAsync(ref, "run");
      await waitForStatus(ref, runId, ["success"]);
      assert.equal((await logsOf(runId, "other")).response.status, 404);
    });
  });
}

describe("run logs expire with results", () => {
  it("deletes a run's lines once the result TTL has passed", async () => {
    const t = await startTestServer({ env: { RUNPLANE_RESULT_TTL: "1s", RUNPLANE_RUN_LEASE: "3s" } });
    after(() => t.close());
    await deployApp(t, "talk", { toml: "", files: { "main.py": MAIN } });
    const ref = { client: t.client, project: TEST_PROJECT, app: "talk" };
    const runId = await submitAsync(ref, "run");
    await waitForStatus(ref, runId, ["success"]);
    await eventually(
      async () => {
        const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
          params: { path: { project_id: TEST_PROJECT, app_id: "talk", run_id: runId } },
        });
        return (data as Log).lines.length === 0 ? true : undefined;
      },
      15_000,
      "the lines to expire",
    );
  });
});
