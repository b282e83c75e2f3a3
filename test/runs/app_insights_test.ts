import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { followEvents } from "../_helpers/event_reader.ts";
import { engines } from "../_helpers/postgres.ts";
import { type AppRef, callRun, getRun, type Run, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";

const MAIN = `import time

def say(word="hi", n=3, pause=0.0):
    for i in range(n):
        print(f"{word} {i}", flush=True)
        time.sleep(pause)
    return word

def fail(word="boom"):
    print(f"{word} before raising", flush=True)
    raise ValueError(word)
`;

type Line = { run_id: string; at: string; stream: string; text: string };
type Page = { lines: Line[]; next_cursor: string; has_more: boolean };
type Bucket = {
  start: string;
  success: number;
  failure: number;
  cancelled: number;
  p50_ms: number | null;
  p95_ms: number | null;
  cold_starts: number;
  replicas: number | null;
};
type Stats = { window: string; bucket_seconds: number; buckets: Bucket[] };

/** The nearest-rank percentile: the ceil(p × n)-th shortest. */
function nearestRank(sorted: number[], percent: number): number {
  return sorted[Math.ceil((percent / 100) * sorted.length) - 1];
}

for (const engine of await engines()) {
  describe(`an app's log tail and activity (${engine})`, () => {
    let t: TestServer;
    let ref: AppRef;
    const ended: string[] = [];

    before(async () => {
      t = await startTestServer({ engine });
      await deployApp(t, "talk", { toml: "[scaling]\nmax_replicas = 2\n", files: { "main.py": MAIN } });
      ref = { client: t.client, project: TEST_PROJECT, app: "talk" };
    });
    after(() => t?.close());

    function logsOf(query: { since?: string; cursor?: string; limit?: number } = {}) {
      return t.client.GET("/v3/projects/{project_id}/apps/{app_id}/logs", {
        params: { path: { project_id: TEST_PROJECT, app_id: "talk" }, query },
      });
    }

    async function allLines(): Promise<Line[]> {
      const lines: Line[] = [];
      let cursor: string | undefined;
      for (;;) {
        const { data, response } = await logsOf({ cursor, limit: 2 });
        assert.equal(response.status, 200);
        const page = data as Page;
        lines.push(...page.lines);
        cursor = page.next_cursor;
        if (!page.has_more) return lines;
      }
    }

    it("gives two runs' lines interleaved by time, each with its run id, page by page", async () => {
      const [a, b] = await Promise.all([
        submitAsync(ref, "say", { body: { word: "alpha", n: 3, pause: 0.2 } }),
        submitAsync(ref, "say", { body: { word: "beta", n: 3, pause: 0.2 } }),
      ]);
      await waitForStatus(ref, a, ["success"]);
      await waitForStatus(ref, b, ["success"]);
      ended.push(a, b);
      const lines = await allLines();
      assert.deepEqual(lines.filter((l) => l.run_id === a).map((l) => l.text), ["alpha 0", "alpha 1", "alpha 2"]);
      assert.deepEqual(lines.filter((l) => l.run_id === b).map((l) => l.text), ["beta 0", "beta 1", "beta 2"]);
      assert.ok(lines.every((l) => l.stream === "stdout"));
      const times = lines.map((l) => Date.parse(l.at));
      assert.deepEqual(times, [...times].sort((x, y) => x - y), "lines are in the order they were written");
      // `since` after every line: nothing.
      const { data } = await logsOf({ since: new Date(Math.max(...times) + 1).toISOString() });
      assert.deepEqual((data as Page).lines, []);
    });

    it("refuses a cursor it did not give", async () => {
      const { response } = await logsOf({ cursor: "bm90IG91cnM" });
      assert.equal(response.status, 400);
    });

    it("follows the app over SSE: a new run's lines arrive with its run id", async () => {
      // On PostgreSQL the run is made through a second server on the same database: its own store
      // connections and log writer, so the follow sees only what reached the store.
      const other = engine === "postgres"
        ? await startTestServer({
          databaseUrl: t.databaseUrl!,
          env: { RUNPLANE_APPS_DIR: t.server.context.config.appsDir },
        })
        : undefined;
      const feed = await followEvents(`${t.url}/v3/projects/${TEST_PROJECT}/apps/talk/logs`, {
        Authorization: `Bearer ${t.token}`,
      });
      try {
        const through = other ? { ...ref, client: other.client } : ref;
        const runId = await submitAsync(through, "say", { body: { word: "gamma", n: 2 } });
        const last = await feed.waitFor((e) => e.data.includes("gamma 1"), 60_000);
        assert.equal((JSON.parse(last.data) as Line).run_id, runId);
        const texts = feed.events.map((e) => JSON.parse(e.data) as Line).filter((l) => l.run_id === runId);
        assert.deepEqual(texts.map((l) => l.text), ["gamma 0", "gamma 1"]);
        // The history came first: the earlier runs' lines are there once each.
        assert.equal(feed.events.filter((e) => e.data.includes('"alpha 0"')).length, 1);
        await waitForStatus(ref, runId, ["success"]);
        ended.push(runId);
      } finally {
        feed.stop();
        await other?.close();
      }
    });

    it("counts runs by outcome per bucket, with nearest-rank p50/p95, as the runs were recorded", async () => {
      for (let i = 0; i < 2; i++) {
        const { response } = await callRun(ref, "fail", { body: {} });
        assert.equal(response.status >= 400, true);
      }
      for (let i = 0; i < 3; i++) {
        const { response } = await callRun(ref, "say", { body: { n: 1, pause: i * 0.05 } });
        assert.equal(response.status, 200);
      }
      const { data: page } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
        params: { path: { project_id: TEST_PROJECT, app_id: "talk" }, query: { limit: 200 } },
      });
      const runs = await Promise.all(
        page!.runs.map(async (r) => (await getRun(ref, r.run_id)).data as Run),
      );
      assert.equal(runs.length, 8, "3 + 2 fails + 3 says");
      const { data, response } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}/stats", {
        params: { path: { project_id: TEST_PROJECT, app_id: "talk" }, query: { window: "1h" } },
      });
      assert.equal(response.status, 200);
      const stats = data as Stats;
      assert.equal(stats.bucket_seconds, 60);
      assert.equal(stats.buckets.length, 60);
      const from = Date.parse(stats.buckets[0].start);
      const expected = new Map<number, { success: number; failure: number; times: number[] }>();
      for (const run of runs) {
        const index = Math.floor((Date.parse(run.completed_at!) - from) / 60_000);
        const bucket = expected.get(index) ?? { success: 0, failure: 0, times: [] };
        if (run.status === "success") bucket.success++;
        if (run.status === "failure") bucket.failure++;
        if (run.run_time_ms !== null && run.run_time_ms !== undefined) bucket.times.push(run.run_time_ms);
        expected.set(index, bucket);
      }
      stats.buckets.forEach((bucket, index) => {
        const want = expected.get(index);
        assert.equal(bucket.success, want?.success ?? 0, `successes of bucket ${index}`);
        assert.equal(bucket.failure, want?.failure ?? 0, `failures of bucket ${index}`);
        assert.equal(bucket.cancelled, 0);
        const sorted = [...(want?.times ?? [])].sort((x, y) => x - y);
        assert.equal(bucket.p50_ms, sorted.length ? nearestRank(sorted, 50) : null, `p50 of bucket ${index}`);
        assert.equal(bucket.p95_ms, sorted.length ? nearestRank(sorted, 95) : null, `p95 of bucket ${index}`);
      });
      assert.equal(stats.buckets.reduce((n, b) => n + b.success + b.failure, 0), 8);
    });

    it("shows the replicas started and running, as the host sampled them", async () => {
      const stats = await eventually(
        async () => {
          const { data } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}/stats", {
            params: { path: { project_id: TEST_PROJECT, app_id: "talk" }, query: { window: "24h" } },
          });
          const s = data as Stats;
          return s.buckets.some((b) => (b.replicas ?? 0) > 0) ? s : undefined;
        },
        60_000,
        "a sample of the app's replicas",
      );
      assert.equal(stats.buckets.length, 96);
      assert.equal(stats.bucket_seconds, 900);
      const started = stats.buckets.reduce((n, b) => n + b.cold_starts, 0);
      const most = Math.max(...stats.buckets.map((b) => b.replicas ?? 0));
      assert.ok(started >= 1 && started <= 2, `replicas started: ${started} (max_replicas = 2, none exited)`);
      assert.ok(most >= 1 && most <= 2, `most replicas at once: ${most}`);
    });

    it("answers 403 to another project's token for both operations", async () => {
      const { token } = await t.mintToken({ projectId: "p-other" });
      for (const path of ["logs", "stats"]) {
        const response = await fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/talk/${path}`, {
          headers: { Authorization: `Bearer ${token}` },
        });
        assert.equal(response.status, 403, path);
        assert.equal(response.headers.get("content-type"), "application/problem+json");
      }
      const feed = fetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/talk/logs`, {
        headers: { Authorization: `Bearer ${token}`, Accept: "text/event-stream" },
      });
      assert.equal((await feed).status, 403);
    });
  });
}
