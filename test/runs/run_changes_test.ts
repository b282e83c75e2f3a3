import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { type FollowedEvents, followEvents } from "../_helpers/event_reader.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

type Change = { run_id: string; app_id: string; status: string; mode: string; function_name: string };

for (const engine of await engines()) {
  describe(`watchRuns: a project's run changes as they happen (${engine})`, () => {
    let t: TestServer;
    let token: string;
    let feed: FollowedEvents;

    before(async () => {
      t = await startTestServer({ engine });
      token = (await t.mintToken({ scopes: ["rest", "run"] })).token;
      await deployApp(t, "hello", { toml: "", files: { "main.py": "def run(name='x'):\n    return {'hi': name}\n" } });
      await deployApp(t, "hello", {
        toml: "",
        project: "p-other",
        files: { "main.py": "def run():\n    return 1\n" },
      });
      feed = await followEvents(`${t.url}/v4/projects/${TEST_PROJECT}/runs/events`, {
        Authorization: `Bearer ${token}`,
      });
    });
    after(async () => {
      feed?.stop();
      await t?.close();
    });

    const changesOf = (runId: string) =>
      feed.events.filter((e) => e.event === "message").map((e) => JSON.parse(e.data) as Change)
        .filter((c) => c.run_id === runId).map((c) => c.status);

    async function call(project: string, query = "", tokenFor = token) {
      const response = await fetch(`${t.url}/v4/${project}/hello/run${query}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${tokenFor}`, "Content-Type": "application/json" },
        body: "{}",
      });
      return response.headers.get("x-request-id")!;
    }

    it("tells a sync run's start and end, and an async run's queueing, start and end, in order", async () => {
      const sync = await call(TEST_PROJECT);
      const queued = await call(TEST_PROJECT, "?async=true");
      await feed.waitFor((e) => e.data.includes(sync) && e.data.includes('"success"'));
      await feed.waitFor((e) => e.data.includes(queued) && e.data.includes('"success"'));
      assert.deepEqual(changesOf(sync), ["running", "success"]);
      assert.deepEqual(changesOf(queued), ["queued", "running", "success"]);
      const last = JSON.parse(feed.events.findLast((e) => e.data.includes(queued))!.data) as Change & {
        run_time_ms: number;
      };
      assert.equal(last.mode, "async");
      assert.equal(last.function_name, "run");
      assert.equal(typeof last.run_time_ms, "number");
    });

    it("tells nothing of another project's runs, and needs a token of the project with rest", async () => {
      const other = (await t.mintToken({ projectId: "p-other", scopes: ["run"] })).token;
      const elsewhere = await call("p-other", "", other);
      const mine = await call(TEST_PROJECT);
      await feed.waitFor((e) => e.data.includes(mine) && e.data.includes('"success"'));
      assert.ok(!feed.events.some((e) => e.data.includes(elsewhere)));
      const denied = await fetch(`${t.url}/v4/projects/${TEST_PROJECT}/runs/events`, {
        headers: { Authorization: `Bearer ${other}`, Accept: "text/event-stream" },
      });
      assert.equal(denied.status, 403);
      await denied.body?.cancel();
    });
  });
}
