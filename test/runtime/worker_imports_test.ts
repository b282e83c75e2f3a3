import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp } from "../_helpers/apps.ts";
import { startTestServer, type TestServer } from "../_helpers/server.ts";

/** An app that imports nothing heavy itself, so what is loaded is what the harness loaded. */
const MAIN = `
import sys, threading

def loaded():
    return {name: name in sys.modules for name in ("asyncio", "inspect", "traceback")}

def options(a, *, b, c=3, run_id):
    return [a, b, c, run_id]

async def on_main_thread():
    return threading.current_thread() is threading.main_thread()
`;

describe("the worker harness imports only what a plain call needs", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    await deployApp(t, "imports", { toml: "[scaling]\nmax_replicas = 1\n", files: { "main.py": MAIN } });
  });
  after(() => t.close());

  async function result(fn: string, body: Record<string, unknown> = {}): Promise<unknown> {
    const { response, data, error } = await callFunction(t, "imports", fn, body);
    assert.equal(response.status, 200, JSON.stringify(error));
    return data!.result;
  }

  it("serves plain calls without importing asyncio, inspect or traceback", async () => {
    assert.deepEqual(await result("loaded"), { asyncio: false, inspect: false, traceback: false });
  });

  it("checks a plain function's keyword-only arguments and passes run_id without inspect", async () => {
    const [a, b, c, runId] = await result("options", { a: 1, b: 2 }) as [number, number, number, string];
    assert.deepEqual([a, b, c], [1, 2, 3]);
    assert.match(runId, /^run_/);
    assert.equal((await result("loaded") as Record<string, boolean>).inspect, false);
    // Arguments that do not fit are explained by inspect's Signature.bind, as before.
    const missing = await callFunction(t, "imports", "options", { a: 1 });
    assert.equal(missing.response.status, 422);
    assert.match(missing.error?.detail ?? "", /options\(\) missing a required argument: 'b'/);
  });

  it("starts the asyncio loop at the first async call, on the main thread", async () => {
    assert.equal(await result("on_main_thread"), true);
    assert.equal((await result("loaded") as Record<string, boolean>).asyncio, true);
  });
});
