import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { engines } from "../_helpers/postgres.ts";
import { type AppRef, submitAsync, TERMINAL, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `
def ok():
    return 1

def fail():
    raise ValueError("no")

def items():
    yield 1
`;

type Query = {
  app_id?: string;
  function_name?: string;
  status?: "queued" | "running" | "success" | "failure" | "cancelled";
  mode?: "sync" | "async" | "stream";
  created_after?: string;
  created_before?: string;
  limit?: number;
  cursor?: string;
};

for (const engine of await engines()) {
  describe(`a project's runs across its apps, paged and filtered (${engine})`, () => {
    let t: TestServer;
    /** Every run made in `before`, oldest first, with what the filters look at. */
    const made: Array<{ id: string; app: string; fn: string; mode: string; status: string }> = [];
    const ref = (app: string): AppRef => ({ client: t.client, project: TEST_PROJECT, app });

    before(async () => {
      t = await startTestServer({ engine });
      await deployApp(t, "alpha", { toml: "", files: { "main.py": MAIN } });
      await deployApp(t, "beta", { toml: "", files: { "main.py": MAIN } });
      await deployApp(t, "gamma", { toml: "", files: { "main.py": MAIN }, project: "p-other" });
      const calls: Array<[string, string, "sync" | "async" | "stream"]> = [
        ["alpha", "ok", "sync"],
        ["beta", "fail", "sync"],
        ["alpha", "fail", "async"],
        ["beta", "ok", "async"],
        ["alpha", "items", "stream"],
        ["beta", "ok", "sync"],
      ];
      for (const [app, fn, mode] of calls) {
        if (mode === "async") {
          const id = await submitAsync(ref(app), fn);
          const run = await waitForStatus(ref(app), id, TERMINAL);
          made.push({ id, app, fn, mode, status: run.status });
          continue;
        }
        const response = await fetch(`${t.url}/v4/${TEST_PROJECT}/${app}/${fn}`, {
          method: "POST",
          headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
          body: "{}",
        });
        await response.text();
        const id = response.headers.get("x-request-id")!;
        made.push({ id, app, fn, mode, status: fn === "fail" ? "failure" : "success" });
      }
      // A run of another project, which no listing of p-test may show.
      const other = await t.mintToken({ projectId: "p-other", scopes: ["run", "rest"] });
      const answer = await fetch(`${t.url}/v4/p-other/gamma/ok`, {
        method: "POST",
        headers: { Authorization: `Bearer ${other.token}`, "Content-Type": "application/json" },
        body: "{}",
      });
      assert.equal(answer.status, 200);
    });
    after(() => t?.close());

    async function list(query: Query = {}) {
      const { data, error, response } = await t.client.GET("/v4/projects/{project_id}/runs", {
        params: { path: { project_id: TEST_PROJECT }, query },
      });
      assert.equal(response.status, 200, JSON.stringify(error));
      return data!;
    }

    /** Every page of `query`, `limit` at a time: the ids in order. */
    async function all(query: Query): Promise<string[]> {
      const ids: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await list({ ...query, cursor });
        assert.ok(page.runs.length <= (query.limit ?? 50));
        ids.push(...page.runs.map((r) => r.run_id));
        cursor = page.next_cursor ?? undefined;
      } while (cursor);
      return ids;
    }

    const newestFirst = (filter: (run: (typeof made)[number]) => boolean) =>
      made.filter(filter).map((r) => r.id).reverse();

    it("lists every app's runs of the project, newest first, page after page", async () => {
      assert.deepEqual(await all({ limit: 2 }), newestFirst(() => true));
      const first = await list({ limit: 50 });
      assert.equal(first.next_cursor, null);
      assert.deepEqual(new Set(first.runs.map((r) => r.app_id)), new Set(["alpha", "beta"]));
      const failed = first.runs.find((r) => r.run_id === made[1].id);
      assert.equal(failed?.error?.type, "ValueError");
      assert.equal(failed?.error?.message, "no");
    });

    it("filters by app, function, status and mode, also across pages", async () => {
      assert.deepEqual(await all({ app_id: "alpha", limit: 1 }), newestFirst((r) => r.app === "alpha"));
      assert.deepEqual(await all({ function_name: "ok", limit: 1 }), newestFirst((r) => r.fn === "ok"));
      assert.deepEqual(await all({ status: "failure", limit: 1 }), newestFirst((r) => r.status === "failure"));
      assert.deepEqual(await all({ mode: "async" }), newestFirst((r) => r.mode === "async"));
      assert.deepEqual(await all({ mode: "stream" }), newestFirst((r) => r.mode === "stream"));
      assert.deepEqual(
        await all({ app_id: "beta", function_name: "ok", mode: "sync" }),
        newestFirst((r) => r.app === "beta" && r.fn === "ok" && r.mode === "sync"),
      );
      assert.deepEqual(await all({ app_id: "gamma" }), [], "another project's app lists nothing");
    });

    it("filters by creation time: at or after created_after, before created_before", async () => {
      const runs = (await list()).runs.slice().reverse();
      const [third, fourth] = [runs[2], runs[3]];
      assert.equal(third.run_id, made[2].id);
      const from = third.created_at;
      // Runs created in the same millisecond are all at `from`: count by times, not by position.
      const expected = runs.filter((r) => Date.parse(r.created_at) >= Date.parse(from)).map((r) => r.run_id)
        .reverse();
      assert.deepEqual(await all({ created_after: from }), expected);
      const until = fourth.created_at;
      assert.deepEqual(
        await all({ created_after: from, created_before: until }),
        runs.filter((r) => Date.parse(r.created_at) >= Date.parse(from) && Date.parse(r.created_at) < Date.parse(until))
          .map((r) => r.run_id).reverse(),
      );
      // Any offset is the same instant.
      const offset = new Date(Date.parse(from) + 2 * 3_600_000).toISOString().replace("Z", "+02:00");
      assert.deepEqual(await all({ created_after: offset }), expected);
      assert.deepEqual(await all({ created_before: "2000-01-01T00:00:00Z" }), []);
    });

    it("refuses a malformed time or cursor with 400, and another project's token with 403", async () => {
      const bad = await fetch(`${t.url}/v4/projects/${TEST_PROJECT}/runs?created_after=yesterday`, {
        headers: { Authorization: `Bearer ${t.token}` },
      });
      assert.equal(bad.status, 400);
      assert.match(((await bad.json()) as { detail: string }).detail, /query\.created_after/);
      const cursor = await fetch(`${t.url}/v4/projects/${TEST_PROJECT}/runs?cursor=abc`, {
        headers: { Authorization: `Bearer ${t.token}` },
      });
      assert.equal(cursor.status, 400);
      const other = await t.mintToken({ projectId: "p-other", scopes: ["run", "rest"] });
      const forbidden = await fetch(`${t.url}/v4/projects/${TEST_PROJECT}/runs`, {
        headers: { Authorization: `Bearer ${other.token}` },
      });
      assert.equal(forbidden.status, 403);
    });
  });
}
