/**
 * Project secrets in use: a project's replicas get them as environment variables, a change replaces the
 * replicas (a call in flight finishes on the old one), other projects and build steps never see them.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { bundleOf, deployBundle } from "../_helpers/deployments.ts";
import { engines } from "../_helpers/postgres.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `import os, time

def secret(name="API_KEY", seconds=0):
    time.sleep(seconds)
    return {"value": os.environ.get(name), "pid": os.getpid()}
`;

for (const engine of await engines()) {
  describe(`project secrets reach the project's replicas and nothing else (${engine})`, () => {
    let t: TestServer;
    let deployToken: string;

    before(async () => {
      t = await startTestServer({ engine });
      deployToken = (await t.mintToken({ scopes: ["deploy", "rest", "run"] })).token;
      await deployApp(t, "reader", { toml: "[deployment]\n", files: { "main.py": MAIN } });
      await deployApp(t, "reader", { toml: "[deployment]\n", files: { "main.py": MAIN }, project: "p-other" });
    });
    after(() => t?.close());

    async function setSecret(name: string, value: string): Promise<void> {
      const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/secrets/${name}`, {
        method: "PUT",
        headers: { Authorization: `Bearer ${deployToken}`, "Content-Type": "application/json" },
        body: JSON.stringify({ value }),
      });
      assert.ok(response.status === 200 || response.status === 201, await response.text());
    }

    async function read(body: Record<string, unknown> = {}, project = TEST_PROJECT, token = t.token) {
      const response = await checkedFetch(`${t.url}/v4/${project}/reader/secret`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      const text = await response.text();
      assert.equal(response.status, 200, text);
      return (JSON.parse(text) as { result: { value: string | null; pid: number } }).result;
    }

    it("a replica sees its project's secret as an environment variable", async () => {
      await setSecret("API_KEY", "first-value");
      await waitFor(async () => (await read()).value === "first-value", "the replica to see the secret");
    });

    it("a change replaces the project's replicas, and a call in flight finishes on the old one", async () => {
      const inFlight = read({ seconds: 2 });
      await new Promise((resolve) => setTimeout(resolve, 300));
      await setSecret("API_KEY", "second-value");
      await waitFor(async () => (await read()).value === "second-value", "a replica with the new value");
      assert.equal((await inFlight).value, "first-value");
    });

    it("refuses the names the platform sets for a replica, as [env] does", async () => {
      for (const name of ["PATH", "HOME", "PORT", "LD_PRELOAD", "PYTHONPATH"]) {
        const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/secrets/${name}`, {
          method: "PUT",
          headers: { Authorization: `Bearer ${deployToken}`, "Content-Type": "application/json" },
          body: JSON.stringify({ value: "x" }),
        });
        assert.equal(response.status, 400, name);
      }
    });

    it("another project's replicas never see it", async () => {
      const other = (await t.mintToken({ projectId: "p-other", scopes: ["run"] })).token;
      assert.equal((await read({}, "p-other", other)).value, null);
    });

    it("a build step never sees it", async () => {
      await setSecret("BUILD_PROBE", "never-in-a-build");
      const toml = '[deployment]\n\n[build]\nshell_commands = ["env", "echo probe=$BUILD_PROBE"]\n';
      const end = await deployBundle(
        t,
        "built",
        await bundleOf({ "runplane.toml": toml, "main.py": MAIN }),
        deployToken,
      );
      assert.equal(end.status, "ready", end.error ?? "");
      const log = end.lines.join("\n");
      assert.ok(log.includes("probe="), log);
      assert.ok(!log.includes("never-in-a-build"), "the build log holds a project secret");
      assert.ok(!t.rawLogs().includes("never-in-a-build"), "the server's log holds a project secret");
    });
  });
}
