import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp, waitFor } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const MAIN = `
import asyncio, os, time

def tokens(marker, pause=1.5):
    yield "first"
    time.sleep(pause)
    yield "line one\\nline two\\nline three"
    yield {"k": [1, 2], "s": "x"}
    yield 3
    open(marker, "w").close()

def endless(marker):
    try:
        i = 0
        while True:
            yield i
            i += 1
            time.sleep(0.2)
    finally:
        open(marker, "w").close()

async def agen(n):
    for i in range(n):
        await asyncio.sleep(0.01)
        yield f"a{i}"

async def aendless(marker):
    try:
        while True:
            yield "tick"
            await asyncio.sleep(0.2)
    except GeneratorExit:
        open(marker, "w").close()
        raise

def breaks():
    yield "ok"
    raise RuntimeError("went wrong mid-stream")

def quiet():
    time.sleep(1.2)
    yield "after silence"

def quick():
    return "quick"

def big(n, size):
    for i in range(n):
        yield {"i": i, "pad": "x" * size, "word": "caf\\u00e9", "small": 1e-07, "line": "a\\r\\nb"}
        if i % 10 == 0:
            yield "s%d" % i + "\\n" + "s" * size
`;

describe("streaming calls", () => {
  let t: TestServer;
  let dir: string;
  before(async () => {
    // The functions write marker files the test reads back: a jailed app cannot (test/sandbox/ covers the jail).
    t = await startTestServer({ env: { RUNPLANE_SSE_HEARTBEAT: "0.3", RUNPLANE_SANDBOX: "off" } });
    dir = await deployApp(t, "gen", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
  });
  after(() => t.close());

  function open(fn: string, body: Record<string, unknown>, signal?: AbortSignal) {
    return checkedFetch(`${t.url}/v4/${TEST_PROJECT}/gen/${fn}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
      signal,
    });
  }

  async function readAll(response: Response): Promise<string> {
    return await response.text();
  }

  it("sends the first event before the generator finishes, and frames strings, multi-line strings and JSON", async () => {
    const marker = join(dir, "tokens.done");
    const response = await open("tokens", { marker });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("content-type"), "text/event-stream; charset=utf-8");
    assert.equal(response.headers.get("cache-control"), "no-cache");
    assert.match(response.headers.get("x-request-id") ?? "", /^run_[0-9a-z]{26}$/);
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    const first = await reader.read();
    assert.equal(first.value, "data: first\n\n");
    assert.equal(existsSync(marker), false, "the generator is still running");
    let rest = "";
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += chunk.value;
    assert.equal(
      rest.replaceAll(": ping\n\n", ""),
      'data: line one\ndata: line two\ndata: line three\n\ndata: {"k":[1,2],"s":"x"}\n\ndata: 3\n\n',
    );
    assert.equal(existsSync(marker), true);
  });

  it("hands big items through in order, events and run record alike", async () => {
    // 20 KB items: their JSON text goes from the worker's line to the event and the record undecoded;
    // the strings among them are decoded (a string's event is its text, one data line per line).
    const n = 30;
    const size = 20_000;
    const response = await open("big", { n, size });
    assert.equal(response.status, 200);
    const events = (await readAll(response)).split("\n\n").filter((event) => event.startsWith("data: "));
    const expected: unknown[] = [];
    for (let i = 0; i < n; i++) {
      expected.push({ i, pad: "x".repeat(size), word: "café", small: 1e-7, line: "a\r\nb" });
      if (i % 10 === 0) expected.push(`s${i}\n${"s".repeat(size)}`);
    }
    assert.equal(events.length, expected.length);
    events.forEach((event, index) => {
      const data = event.split("\n").map((line) => line.slice("data: ".length)).join("\n");
      assert.deepEqual(
        typeof expected[index] === "string" ? data : JSON.parse(data),
        expected[index],
        `event ${index}`,
      );
    });
    const runId = response.headers.get("x-request-id")!;
    const run = await waitForStatus({ client: t.client, project: TEST_PROJECT, app: "gen" }, runId, ["success"]);
    assert.equal(run.result_truncated, false);
    assert.deepEqual(run.result, expected);
  });

  it("streams an async generator", async () => {
    const response = await open("agen", { n: 3 });
    assert.equal(await readAll(response), "data: a0\n\ndata: a1\n\ndata: a2\n\n");
  });

  it("closes the generator when the client disconnects and frees the slot", async () => {
    const marker = join(dir, "endless.finally");
    const abort = new AbortController();
    const response = await open("endless", { marker }, abort.signal);
    const reader = response.body!.getReader();
    await reader.read();
    const disconnectedAt = Date.now();
    abort.abort();
    await waitFor(() => existsSync(marker), "the generator's finally to run", 5_000);
    const closedIn = Date.now() - disconnectedAt;
    assert.ok(closedIn < 2_000, `finally ran ${closedIn} ms after the disconnect`);
    // One slot only: the next call gets it.
    const next = await callFunction(t, "gen", "quick");
    assert.equal(next.data?.result, "quick");
    assert.equal(t.server.context.runtime.capacity(TEST_PROJECT, "gen").busy, 0);
  });

  it("stops a sync call's function when its client disconnects, and frees the slot", async () => {
    // An app of its own: the other tests write marker files into gen's folder, which redeploys it.
    await deployApp(t, "napper", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\n",
      files: {
        "main.py": "import asyncio\n\nasync def nap(seconds):\n    await asyncio.sleep(seconds)\n    return 'late'\n",
      },
    });
    const busy = () => t.server.context.runtime.capacity(TEST_PROJECT, "napper").busy;
    assert.equal((await callFunction(t, "napper", "nap", { seconds: 0 })).data?.result, "late");
    const abort = new AbortController();
    const call = checkedFetch(`${t.url}/v4/${TEST_PROJECT}/napper/nap`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ seconds: 30 }),
      signal: abort.signal,
    }).catch((error: unknown) => error);
    await waitFor(() => busy() === 1, "the call to start", 10_000);
    abort.abort();
    assert.equal(((await call) as Error).name, "AbortError");
    // The function would hold the only slot for 30 s; the disconnect cancels it in the worker.
    await waitFor(() => busy() === 0, "the slot to be free", 5_000);
    assert.equal((await callFunction(t, "napper", "nap", { seconds: 0 })).data?.result, "late");
  });

  it("raises GeneratorExit in an async generator when the client disconnects", async () => {
    const marker = join(dir, "aendless.exit");
    const abort = new AbortController();
    const response = await open("aendless", { marker }, abort.signal);
    await response.body!.getReader().read();
    abort.abort();
    await waitFor(() => existsSync(marker), "GeneratorExit in the async generator", 5_000);
    await waitFor(
      () => t.server.context.runtime.capacity(TEST_PROJECT, "gen").busy === 0,
      "the slot to be free",
      5_000,
    );
  });

  it("ends with an error event carrying a problem document when the generator raises", async () => {
    const response = await open("breaks", {});
    const text = await readAll(response);
    const [ok, error] = text.split("\n\n");
    assert.equal(ok, "data: ok");
    assert.match(error, /^event: error\ndata: /);
    const problem = JSON.parse(error.slice(error.indexOf("data: ") + 6)) as Record<string, string>;
    assert.equal(problem.status, 500);
    assert.equal(problem.exception_type, "RuntimeError");
    assert.match(problem.traceback, /went wrong mid-stream/);
    assert.equal(problem.run_id, response.headers.get("x-request-id"));
  });

  it("sends a ping comment during silence", async () => {
    const response = await open("quiet", {});
    const text = await readAll(response);
    assert.match(text, /^(: ping\n\n)+data: after silence\n\n$/);
  });
});
