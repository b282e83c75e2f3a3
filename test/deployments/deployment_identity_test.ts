import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { engines } from "../_helpers/postgres.ts";
import { callRun, getRun, listRuns, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `def run():\n    return "ok"\n\ndef items():\n    yield 1\n    yield 2\n`;
const SHA1 = "0123456789abcdef0123456789abcdef01234567";
const SHA256 = "0123456789abcdef".repeat(4);

type Deployment = { deployment_id: string; message: string | null; commit: string | null; dirty: boolean };

for (const engine of await engines()) {
  describe(`a deployment's message and commit, and the deployment a run ran on (${engine})`, () => {
    let t: TestServer;
    let token: string;
    const ref = (app: string) => ({ client: t.client, project: TEST_PROJECT, app });

    before(async () => {
      t = await startTestServer({ engine });
      token = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    });
    after(() => t?.close());

    async function upload(appId: string, query: string, body?: { json: unknown }): Promise<Response> {
      const json = body !== undefined;
      return await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/${appId}/deployments?${query}`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": json ? "application/json" : "application/gzip" },
        body: json
          ? JSON.stringify(body.json)
          : new Uint8Array(await bundleOf({ "runplane.toml": "", "main.py": MAIN })),
      });
    }

    it("keeps a bundle's message, commit and dirty, and shows them wherever the deployment is shown", async () => {
      const message = "Fix the greeting ✓\nSecond line\twith a tab";
      const query = new URLSearchParams({ message, commit: SHA1, dirty: "true" });
      const accepted = await upload("labelled", query.toString());
      assert.equal(accepted.status, 202, await accepted.clone().text());
      const body = (await accepted.json()) as Deployment;
      assert.deepEqual([body.message, body.commit, body.dirty], [message, SHA1, true]);
      const { data: one } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}/deployments/{deployment_id}", {
        params: { path: { project_id: TEST_PROJECT, app_id: "labelled", deployment_id: body.deployment_id } },
      });
      assert.deepEqual([one?.message, one?.commit, one?.dirty], [message, SHA1, true]);
      const sha256 = await upload("labelled", `commit=${SHA256}`);
      assert.equal(sha256.status, 202);
      const { data: page } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}/deployments", {
        params: { path: { project_id: TEST_PROJECT, app_id: "labelled" } },
      });
      assert.deepEqual(page?.deployments.map((d) => [d.message, d.commit, d.dirty]), [
        [null, SHA256, false],
        [message, SHA1, true],
      ]);
    });

    it("refuses a message that is empty, too long or holds control characters, and a commit that is no git id", async () => {
      const refused: Array<[string, string]> = [
        ["message=", "query.message"],
        [`message=${"x".repeat(501)}`, "query.message"],
        [`message=${encodeURIComponent("bell\u0007")}`, "query.message"],
        [`message=${encodeURIComponent("escape\u001b[31m")}`, "query.message"],
        [`message=${encodeURIComponent("csi\u009b31m")}`, "query.message"],
        ["commit=abc123", "query.commit"],
        [`commit=${SHA1.toUpperCase()}`, "query.commit"],
        ["dirty=true", "query.dirty"],
      ];
      for (const [query, path] of refused) {
        const response = await upload("refused", query);
        assert.equal(response.status, 400, query);
        const problem = (await response.json()) as { errors?: Array<{ path: string }> };
        assert.deepEqual(problem.errors?.map((e) => e.path), [path], query);
      }
      assert.equal((await upload("refused", `message=${"x".repeat(500)}`)).status, 202, "500 characters fit");
    });

    it("refuses a commit for a repository deployment: its commit is the one its ref resolves to", async () => {
      const response = await upload("from-repo", `commit=${SHA1}`, {
        json: { source: { owner: "acme", repo: "apps" } },
      });
      assert.equal(response.status, 400);
      const problem = (await response.json()) as { errors?: Array<{ path: string }> };
      assert.deepEqual(problem.errors?.map((e) => e.path), ["query.commit"]);
    });

    it("records on each run the deployment that served it: sync, async and stream; a new deployment's runs say so", async () => {
      const first = await deployBundle(t, "served", await bundleOf({ "runplane.toml": "", "main.py": MAIN }), token);
      assert.equal(first.status, "ready");
      const sync = await callRun(ref("served"), "run");
      const syncId = sync.response.headers.get("x-request-id")!;
      const asyncId = await submitAsync(ref("served"), "run");
      await waitForStatus(ref("served"), asyncId, ["success"]);
      const stream = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/served/items`, {
        method: "POST",
        headers: {
          Authorization: `Bearer ${t.token}`,
          "Content-Type": "application/json",
          Accept: "text/event-stream",
        },
        body: "{}",
      });
      await stream.text();
      const streamId = stream.headers.get("x-request-id")!;
      await waitForStatus(ref("served"), streamId, ["success"]);
      for (const runId of [syncId, asyncId, streamId]) {
        const { data: run } = await getRun(ref("served"), runId);
        assert.equal(run?.deployment_id, first.deployment_id, `${run?.mode} run ${runId}`);
      }

      const second = await deployBundle(
        t,
        "served",
        await bundleOf({ "runplane.toml": "", "main.py": `${MAIN}\n# v2\n` }),
        token,
      );
      assert.equal(second.status, "ready");
      const later = await callRun(ref("served"), "run");
      const laterId = later.response.headers.get("x-request-id")!;
      assert.equal((await getRun(ref("served"), laterId)).data?.deployment_id, second.deployment_id);
      const { data: page } = await listRuns(ref("served"));
      const listed = new Map(page?.runs.map((r) => [r.run_id, r.deployment_id]));
      assert.equal(listed.get(laterId), second.deployment_id);
      assert.equal(listed.get(syncId), first.deployment_id);
    });

    it("records no deployment for a run of an app of the apps folder", async () => {
      await deployApp(t, "folder", { toml: "", files: { "main.py": MAIN } });
      const call = await callRun(ref("folder"), "run");
      assert.equal(call.response.status, 200);
      const runId = call.response.headers.get("x-request-id")!;
      const { data: run } = await getRun(ref("folder"), runId);
      assert.equal(run?.status, "success");
      assert.equal(run?.deployment_id, null);
    });
  });
}
