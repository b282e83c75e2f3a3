/**
 * "Ready means served": once a deploy reports ready, the process that built it serves the new version to
 * the very next call, and goes on serving it (a follow-up read of the store that began before the build
 * was recorded does not switch it back). RUNPLANE_TEST_DELAY_LOCAL_SYNC (test only) holds every
 * follow-up read between reading the store and switching, so a stale read is sure to be in flight when
 * the build ends: the race of a loaded host, made reproducible.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { callFunction } from "../_helpers/apps.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Longer than the follow-up reads' poll (2 s), so reads run back to back and one is always held. */
const DELAY_MS = 3000;

function app(version: string): Record<string, string> {
  return {
    "runplane.toml": `[deployment]\nname = "served"\n`,
    "main.py": `def run():\n    return {"v": "${version}"}\n`,
  };
}

for (const engine of await engines()) {
  describe(`a deploy reported ready is served (${engine})`, () => {
    let t: TestServer;
    let deployToken: string;

    before(async () => {
      t = await startTestServer({ engine, env: { RUNPLANE_TEST_DELAY_LOCAL_SYNC: `${DELAY_MS}ms` } });
      deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
    });
    after(() => t?.close());

    /** The version that answers a call now (the status too, so a 404 shows as such). */
    async function answer(): Promise<string> {
      const { response, data } = await callFunction(t, "served", "run");
      return response.status === 200 ? (data!.result as { v: string }).v : `status ${response.status}`;
    }

    it("the first call after ready reaches the new version, and so does every call after it", {
      timeout: 120_000,
    }, async () => {
      const first = await deployBundle(t, "served", await bundleOf(app("1")), deployToken);
      assert.equal(first.status, "ready", first.lines.join("\n"));
      assert.equal(await answer(), "1", "the first call after the first deploy is ready (no 404)");

      const second = await deployBundle(t, "served", await bundleOf(app("2")), deployToken);
      assert.equal(second.status, "ready", second.lines.join("\n"));
      assert.ok(second.active);
      assert.equal(await answer(), "2", "the first call after the second deploy is ready");
      const { data: shown } = await t.client.GET("/v3/projects/{project_id}/apps/{app_id}", {
        params: { path: { project_id: TEST_PROJECT, app_id: "served" } },
      });
      assert.deepEqual(shown?.served_by.map((s) => s.deployment_id), [second.deployment_id], "getApp says so");
      // A follow-up read held by the hook when the build ended would switch back within DELAY_MS, and
      // the one after it forward again: every call over two of its rounds must still reach version 2.
      const seen = new Set<string>();
      const until = Date.now() + 2 * DELAY_MS + 1000;
      while (Date.now() < until) seen.add(await answer());
      assert.deepEqual([...seen], ["2"], "every call after ready reached version 2");
    });
  });
}
