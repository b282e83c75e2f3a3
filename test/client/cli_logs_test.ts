/**
 * `runplane logs`: every run's lines of an app, interleaved with their run ids, from a real server (its
 * answers checked against the contract by a proxy), and `--follow` seeing a new run's lines.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { CapturedOutput, runMain } from "../_helpers/cli.ts";
import { submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { type FaultProxy, startFaultProxy } from "./_fault_proxy.ts";

const MAIN = `import sys

def say(word="hi"):
    print(f"{word} out", flush=True)
    print(f"{word} err", file=sys.stderr, flush=True)
    return word
`;

describe("runplane logs", { timeout: 300_000 }, () => {
  let t: TestServer;
  let proxy: FaultProxy;
  let env: Record<string, string>;
  const ref = () => ({ client: t.client, project: TEST_PROJECT, app: "talk" });

  before(async () => {
    t = await startTestServer();
    proxy = await startFaultProxy(t.url, { fault: () => undefined });
    await deployApp(t, "talk", { toml: "", files: { "main.py": MAIN } });
    env = { RUNPLANE_BASE_URL: proxy.url, RUNPLANE_TOKEN: t.token };
  });
  after(async () => {
    await proxy?.close();
    await t?.close();
  });

  const cli = (args: string[], options: Parameters<typeof runMain>[1] = {}) =>
    runMain(args, { ...options, env: { ...env, ...options.env } });

  it("prints two runs' lines with their time and run id, each on the stream it was written to", async () => {
    const a = await submitAsync(ref(), "say", { body: { word: "alpha" } });
    await waitForStatus(ref(), a, ["success"]);
    const b = await submitAsync(ref(), "say", { body: { word: "beta" } });
    await waitForStatus(ref(), b, ["success"]);
    const out = await cli(["logs", "talk"]);
    assert.equal(out.code, 0, out.stderr);
    const lines = out.stdout.trimEnd().split("\n").map((line) => line.split(" "));
    assert.deepEqual(lines.map(([, runId, ...text]) => [runId, text.join(" ")]), [[a, "alpha out"], [b, "beta out"]]);
    assert.ok(lines.every(([at]) => !Number.isNaN(Date.parse(at))));
    assert.deepEqual(out.stderr.trimEnd().split("\n").map((line) => line.split(" ").slice(1).join(" ")), [
      `${a} alpha err`,
      `${b} beta err`,
    ]);
    const json = await cli(["logs", `${TEST_PROJECT}/talk`, "--json", "--since", "1h"]);
    const records = json.stdout.trimEnd().split("\n").map((line) => JSON.parse(line) as Record<string, string>);
    assert.deepEqual(records.map((r) => [r.run_id, r.stream, r.text]), [
      [a, "stdout", "alpha out"],
      [a, "stderr", "alpha err"],
      [b, "stdout", "beta out"],
      [b, "stderr", "beta err"],
    ]);
    const later = await cli(["logs", "talk", "--since", new Date(Date.now() + 60_000).toISOString()]);
    assert.equal(later.stdout, "");
  });

  it("--follow prints a new run's lines as they come", async () => {
    const controller = new AbortController();
    const stdout = new CapturedOutput();
    const following = cli(["logs", "talk", "--follow", "--since", "1s"], { stdout, signal: controller.signal });
    const runId = await submitAsync(ref(), "say", { body: { word: "gamma" } });
    await waitFor(() => stdout.text.includes(`${runId} gamma out\n`), "the new run's line", 60_000);
    controller.abort();
    assert.equal((await following).code, 0, "an interrupted tail exits 0");
  });

  it("refuses a --since it cannot read, and another project's token", async () => {
    const bad = await cli(["logs", "talk", "--since", "yesterday"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--since takes a duration/);
    const { token } = await t.mintToken({ projectId: "p-other" });
    const other = await cli(["logs", `${TEST_PROJECT}/talk`], { env: { RUNPLANE_TOKEN: token } });
    assert.equal(other.code, 1);
    assert.match(other.stderr, /403|another project|not allowed|forbidden/i);
  });
});
