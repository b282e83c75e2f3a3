/**
 * A drain that runs past its timeout cuts the calls still running: the caller gets a problem of type
 * `interrupted`, the word its run record holds, not a crashed worker's 502.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Agent, fetch } from "undici";
import { deployApp, waitFor } from "../_helpers/apps.ts";
import { assertMatchesContract } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

describe("a call cut by the drain timeout", () => {
  let t: TestServer;
  // No keep-alive: the drain's close waits for open connections, an idle one included.
  const dispatcher = new Agent({ keepAliveTimeout: 1, keepAliveMaxTimeout: 1 });
  before(async () => {
    t = await startTestServer();
    await deployApp(t, "slow", {
      toml: "[deployment]\n",
      files: { "main.py": "import time\n\ndef run():\n    print('started', flush=True)\n    time.sleep(60)\n" },
    });
  });
  after(async () => {
    await t?.close();
    await dispatcher.close();
  });

  it("answers a problem of type interrupted, and the record says interrupted", async () => {
    const url = `${t.url}/v4/${TEST_PROJECT}/slow/run`;
    const answer = fetch(url, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: "{}",
      dispatcher,
    });
    await waitFor(() => t.logs.some((l) => l.msg === "function output" && l.text === "started"), "the call to run");
    const drained = t.server.drain(200);
    const response = await answer;
    await assertMatchesContract("POST", url, response.clone() as unknown as Response);
    const problem = (await response.json()) as { type: string; run_id: string };
    assert.equal(problem.type, "https://runplane.dev/problems/interrupted");
    await waitFor(() => t.logs.some((l) => l.msg === "run finished"), "the run's end to be recorded");
    const run = await t.server.context.store.db.selectFrom("runs").select(["status", "error_type"]).where(
      "run_id",
      "=",
      problem.run_id,
    ).executeTakeFirstOrThrow();
    assert.equal(run.error_type, "interrupted");
    await drained;
  });
});
