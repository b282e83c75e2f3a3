/**
 * Dynamic batching (issue 49): `[functions.<name>] batch` groups concurrent calls of a function into one
 * invocation in front of its replica. Real server, real jailed workers; no timing upper bounds.
 */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { callFunction, deployApp } from "../_helpers/apps.ts";
import { cancelRun, getRun, type Run, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { eventually } from "../_helpers/webhook_receiver.ts";
import { parseAppConfig } from "../../server/runtime/_app_config.ts";
import { callsPerSlot } from "../../server/runtime/_batch_config.ts";

const MAIN = `
import time
from runplane import batched

SEEN = {}

def _saw(name, values):
    SEEN.setdefault(name, []).append(list(values))

def square(x, scale=1):
    _saw("square", x)
    return [v * s for v, s in zip(x, scale)]

async def asquare(x, scale=1):
    _saw("asquare", x)
    return [v * s for v, s in zip(x, scale)]

def fails(x):
    _saw("fails", x)
    if 13 in x:
        raise ValueError("unlucky 13 in the batch")
    return x

def short(x):
    return x[:-1]

def scalar(x):
    return 7

def waits(x):
    return [time.monotonic() for _ in x]

def slow(x):
    _saw("slow", x)
    time.sleep(1.5)
    return x

def pair(x):
    _saw("pair", x)
    return x

def talks(x):
    print("shared line")
    return x

@batched(max_size=4, wait_ms=20)
def decorated(x):
    return [len(x)] * len(x)

def seen(name):
    return SEEN.get(name, [])

def forge(x):
    # A hostile app writes a batch report the protocol does not allow, on the server's own pipe.
    import os
    os.write(4, b'{"op":"batch","fn":"forge","size":0,"wait_ms":-1}\\n')
    return x
`;

const TOML = `[deployment]
name = "batch"

[scaling]
max_replicas = 1
replica_concurrency = 2
response_grace_period = 60

[functions.square]
batch = { max_size = 8, wait_ms = 200 }

[functions.asquare]
batch = { max_size = 8, wait_ms = 200 }

[functions.fails]
batch = { max_size = 3, wait_ms = 10000 }

[functions.short]
batch = { max_size = 2, wait_ms = 10000 }

[functions.scalar]
batch = { max_size = 1, wait_ms = 0 }

[functions.waits]
batch = { max_size = 8, wait_ms = 300 }

[functions.slow]
batch = { max_size = 2, wait_ms = 10000 }

[functions.pair]
batch = { max_size = 2, wait_ms = 10000 }

[functions.talks]
batch = { max_size = 2, wait_ms = 10000 }

[functions.decorated]
batch = { max_size = 4, wait_ms = 20 }

[functions.forge]
batch = { max_size = 1, wait_ms = 0 }
`;

describe("batched functions ([functions.<name>] batch)", () => {
  let t: TestServer;
  const ref = () => ({ client: t.client, project: TEST_PROJECT, app: "batch" });
  before(async () => {
    t = await startTestServer();
    await deployApp(t, "batch", { toml: TOML, files: { "main.py": MAIN } });
  });
  after(() => t.close());

  async function seen(name: string): Promise<number[][]> {
    const { data } = await callFunction(t, "batch", "seen", { name });
    return data!.result as number[][];
  }

  it("lands each result on its own call: every order, defaults per call, sync and async callers together", async () => {
    const inputs = Array.from({ length: 40 }, (_, i) => ({ x: (i * 37) % 101, scale: i % 3 === 0 ? undefined : i }));
    const calls = inputs.map(async ({ x, scale }, i) => {
      const body = scale === undefined ? { x } : { x, scale };
      const fn = i % 2 ? "square" : "asquare";
      if (i % 4 === 3) {
        const runId = await submitAsync(ref(), fn, { body });
        const run = await waitForStatus(ref(), runId, ["success", "failure", "cancelled"]);
        return { result: run.result, runId };
      }
      const { data, response, error } = await callFunction(t, "batch", fn, body);
      assert.equal(response.status, 200, JSON.stringify(error));
      return { result: data!.result, runId: data!.run_id };
    });
    const answers = await Promise.all(calls);
    answers.forEach((answer, i) => assert.equal(answer.result, inputs[i].x * (inputs[i].scale ?? 1), `call ${i}`));
    assert.equal(new Set(answers.map((a) => a.runId)).size, 40, "every call keeps its own run id");
    const batches = [...await seen("square"), ...await seen("asquare")];
    assert.equal(batches.flat().length, 40, "every call ran exactly once");
    assert.ok(
      batches.every((batch) => batch.length >= 1 && batch.length <= 8),
      `sizes ${batches.map((b) => b.length)}`,
    );
    assert.ok(batches.some((batch) => batch.length > 1), "concurrent callers shared a batch");
  });

  it("fails every call of a batch with the function's exception", async () => {
    const answers = await Promise.all([1, 13, 2].map((x) => callFunction(t, "batch", "fails", { x })));
    for (const { response, error } of answers) {
      assert.equal(response.status, 500);
      const problem = error as { exception_type?: string; detail?: string };
      assert.equal(problem.exception_type, "ValueError");
      assert.match(problem.detail ?? "", /unlucky 13 in the batch/);
    }
    assert.deepEqual((await seen("fails")).map((batch) => [...batch].sort()), [[1, 13, 2].sort()]);
  });

  it("fails the batch when the result is not a list with one element per call, saying so", async () => {
    const [sync, runId] = await Promise.all([
      callFunction(t, "batch", "short", { x: 5 }),
      submitAsync(ref(), "short", { body: { x: 6 } }),
    ]);
    assert.equal(sync.response.status, 500);
    assert.match(
      (sync.error as { detail?: string }).detail ?? "",
      /one result per call \(2\), but returned a list of 1/,
    );
    const run = await waitForStatus(ref(), runId, ["failure", "success", "cancelled"]);
    assert.equal(run.error?.type, "bad_batch_result");
    assert.match(run.error?.message ?? "", /one result per call \(2\)/);
    const { error } = await callFunction(t, "batch", "scalar", { x: 1 });
    assert.match((error as { detail?: string }).detail ?? "", /returned a int/);
  });

  it("waits at least wait_ms for more calls when one caller is alone", async () => {
    const started = performance.now();
    const { data } = await callFunction(t, "batch", "waits", { x: 1 });
    assert.equal(typeof data?.result, "number");
    assert.ok(performance.now() - started >= 300, `answered after ${performance.now() - started} ms`);
  });

  it("a call cancelled before its batch starts leaves it; the others run without it", async () => {
    const cancelled = await submitAsync(ref(), "pair", { body: { x: 100 } });
    await eventually(async () => ((await getRun(ref(), cancelled)).data?.status === "running" ? true : undefined));
    assert.equal((await cancelRun(ref(), cancelled)).response.status < 300, true);
    const run = await waitForStatus(ref(), cancelled, ["cancelled", "success", "failure"]);
    assert.equal(run.status, "cancelled");
    const answers = await Promise.all([101, 102].map((x) => callFunction(t, "batch", "pair", { x })));
    assert.deepEqual(answers.map((a) => a.data?.result), [101, 102]);
    assert.deepEqual((await seen("pair")).map((batch) => [...batch].sort()), [[101, 102]]);
  });

  it("a call cancelled while its batch runs ends cancelled; the batch's other call gets its result", async () => {
    const [a, b] = await Promise.all([200, 201].map((x) => submitAsync(ref(), "slow", { body: { x } })));
    await eventually(async () => ((await seen("slow")).length ? true : undefined));
    await cancelRun(ref(), a);
    const runs: Run[] = await Promise.all(
      [a, b].map((id) => waitForStatus(ref(), id, ["cancelled", "success", "failure"])),
    );
    assert.equal(runs[0].status, "cancelled");
    assert.equal(runs[1].status, "success");
    assert.equal(runs[1].result, 201);
  });

  it("gives every run of a batch the lines printed during it, marked with the batch's size", async () => {
    const ids = await Promise.all([1, 2].map((x) => submitAsync(ref(), "talks", { body: { x } })));
    for (const runId of ids) {
      await waitForStatus(ref(), runId, ["success"]);
      const lines = await eventually(async () => {
        const { data } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs/{run_id}/logs", {
          params: { path: { project_id: TEST_PROJECT, app_id: "batch", run_id: runId } },
        });
        const found = (data as { lines: Array<{ text: string }> }).lines;
        return found.length ? found : undefined;
      });
      assert.deepEqual(lines.map((line) => line.text), ["[batch of 2] shared line"]);
    }
  });

  it("fails a call with arguments the function does not take alone, before it joins a batch", async () => {
    const [bad, good] = await Promise.all([
      callFunction(t, "batch", "square", { x: 1, bogus: 2 }),
      callFunction(t, "batch", "square", { x: 3 }),
    ]);
    assert.equal(bad.response.status, 422);
    assert.match((bad.error as { detail?: string }).detail ?? "", /bogus/);
    assert.equal(good.data?.result, 3);
  });

  it("ends a worker that sends a batch report the protocol does not allow (502), and serves on", async () => {
    const { response, error } = await callFunction(t, "batch", "forge", { x: 1 });
    assert.equal(response.status, 502);
    assert.match((error as { detail?: string }).detail ?? "", /batch message with a missing or invalid size/);
    const { data } = await callFunction(t, "batch", "square", { x: 4 });
    assert.equal(data?.result, 4);
  });

  it("accepts @batched that agrees with runplane.toml, and counts batches in /metrics", async () => {
    const { data } = await callFunction(t, "batch", "decorated", { x: 1 });
    assert.equal(data?.result, 1);
    const text = await (await fetch(`${t.url}/metrics`)).text();
    assert.match(text, /runplane_batch_size_count\{app="p-test\/batch",function="decorated"\} 1/);
    assert.match(text, /runplane_batch_wait_seconds_count\{app="p-test\/batch",function="square"\}/);
  });
});

describe("the example batched NumPy model (examples/apps/p-demo/embed)", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    const example = new URL("../../examples/apps/p-demo/embed/", import.meta.url);
    const files = Object.fromEntries(
      await Promise.all(
        ["main.py", "runplane.toml"].map(async (name) => [name, await readFile(new URL(name, example), "utf8")]),
      ),
    );
    await deployApp(t, "embed", { toml: files["runplane.toml"], files: { "main.py": files["main.py"] } });
  });
  after(() => t.close());

  it("answers concurrent callers each with the row the unbatched model gives for its input", async () => {
    const inputs = Array.from({ length: 24 }, (_, i) => Array.from({ length: 64 }, (_, j) => Math.sin(i * 64 + j)));
    const batched = await Promise.all(
      inputs.map((features, i) =>
        callFunction(t, "embed", "embed", i % 2 ? { features } : { features, normalize: false })
      ),
    );
    for (const [i, features] of inputs.entries()) {
      const { data } = await callFunction(t, "embed", "embed_one", { features, normalize: i % 2 === 1 });
      assert.equal(batched[i].response.status, 200, JSON.stringify(batched[i].error));
      assert.deepEqual(batched[i].data?.result, data?.result, `caller ${i}`);
      assert.equal((data?.result as number[]).length, 16);
    }
  });
});

describe("main.py that does not fit its batch settings does not load", () => {
  let t: TestServer;
  before(async () => (t = await startTestServer()));
  after(() => t.close());

  const cases: Array<[string, string, string, RegExp]> = [
    ["missing", "def other(x):\n    return x\n", "nothere", /names no public function of main.py/],
    ["generator", "def gen(x):\n    yield x\n", "gen", /a generator cannot be batched/],
    [
      "mismatch",
      "from runplane import batched\n\n@batched(max_size=8, wait_ms=5)\ndef fn(x):\n    return x\n",
      "fn",
      /@batched\(max_size=8, wait_ms=5\) but runplane.toml says max_size = 4, wait_ms = 5/,
    ],
    ["varargs", "def fn(*x):\n    return x\n", "fn", /named parameters only/],
  ];
  for (const [app, main, fn, reason] of cases) {
    it(`refuses ${app}`, async () => {
      const toml = `[deployment]\nname = "${app}"\n\n[functions.${fn}]\nbatch = { max_size = 4, wait_ms = 5 }\n`;
      await deployApp(t, app, { toml, files: { "main.py": main } });
      const { response, error } = await callFunction(t, app, fn, { x: 1 });
      assert.equal(response.status, 503);
      assert.match((error as { detail?: string }).detail ?? "", /BatchConfigError/);
      assert.match((error as { detail?: string }).detail ?? "", reason);
    });
  }
});

describe("[functions.<name>] batch in runplane.toml is checked key by key", () => {
  const parse = (functions: string) => parseAppConfig(`[deployment]\nname = "x"\n${functions}`, "/tmp");
  it("reads max_size and wait_ms", () => {
    const config = parse("[functions.embed]\nbatch = { max_size = 32, wait_ms = 10 }\n");
    assert.deepEqual(config.functions, { embed: { batch: { maxSize: 32, waitMs: 10 } } });
    assert.equal(callsPerSlot(config.functions), 64);
    assert.equal(callsPerSlot(parse("").functions), 1);
  });
  for (
    const [text, message] of [
      [
        "[functions.f]\nbatch = { max_size = 0, wait_ms = 10 }",
        /functions.f.batch.max_size must be a whole number from 1 to 1024, got 0/,
      ],
      ["[functions.f]\nbatch = { max_size = 1025, wait_ms = 10 }", /max_size must be a whole number from 1 to 1024/],
      ["[functions.f]\nbatch = { max_size = 2, wait_ms = 10001 }", /wait_ms must be a whole number from 0 to 10000/],
      ["[functions.f]\nbatch = { max_size = 2, wait_ms = 1.5 }", /wait_ms must be a whole number/],
      ["[functions.f]\nbatch = { max_size = 2 }", /functions.f.batch.wait_ms is missing/],
      ["[functions.f]\nbatch = { max_size = 2, wait_ms = 1, extra = 1 }", /unknown key functions.f.batch.extra/],
      ["[functions.f]\nbatch = 3", /functions.f.batch must be a table/],
      ["[functions.f]\nretries = 3", /unknown key functions.f.retries/],
      ['[functions."_private"]\nbatch = { max_size = 2, wait_ms = 1 }', /is not a public Python function name/],
      ['[functions."a.b"]\nbatch = { max_size = 2, wait_ms = 1 }', /is not a public Python function name/],
      ["[functions]\nf = 3", /functions.f must be a table/],
    ] as Array<[string, RegExp]>
  ) {
    it(`refuses ${JSON.stringify(text)}`, () => assert.throws(() => parse(text), message));
  }
  it("refuses [functions] on a custom runtime", () => {
    const text = `[deployment]\nname = "x"\nruntime = "custom"\n[runtime.custom]\nentrypoint = ["x"]\n`
      + "[functions.f]\nbatch = { max_size = 2, wait_ms = 1 }\n";
    assert.throws(() => parseAppConfig(text, "/tmp"), /applies to Python apps/);
  });
});
