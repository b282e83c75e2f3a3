import assert from "node:assert/strict";
import { readdirSync, readlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { type AppRef, callRun, getRun, listRuns, submitAsync, waitForStatus } from "../_helpers/runs.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { startWebhookReceiver, type WebhookReceiver } from "../_helpers/webhook_receiver.ts";
import { RawJson } from "../../server/json/mod.ts";
import { SpillFile } from "../../server/runs/_spill_file.ts";
import { StoredItems, storedResult } from "../../server/runs/_stored_result.ts";

const LIMIT = 4096;

const MAIN = `
def blob(n):
    return "x" * n

def small():
    return {"ok": 1}

def chunks(n, size):
    for i in range(n):
        yield ("%04d" % i) + "y" * (size - 4)
`;

/** The JSON bytes of `value`. */
function bytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value));
}

/** Reads a stream call's events' data lines. */
async function streamData(t: TestServer, fn: string, body: Record<string, unknown>, query = "") {
  const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/big/${fn}${query}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 200);
  const text = await response.text();
  const data = text.split("\n\n").filter((event) => event.startsWith("data: ")).map((event) => event.slice(6));
  return { runId: response.headers.get("x-request-id")!, data };
}

describe("stored results are bounded by RUNPLANE_RESULT_LIMIT", () => {
  let t: TestServer;
  let receiver: WebhookReceiver;
  const ref: () => AppRef = () => ({ client: t.client, project: TEST_PROJECT, app: "big" });

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_RESULT_LIMIT: `${LIMIT}`, RUNPLANE_WEBHOOK_ALLOW_PRIVATE: "1" } });
    await deployApp(t, "big", {
      toml: "[scaling]\nmax_replicas = 2\nreplica_concurrency = 2\nresponse_grace_period = 60\n",
      files: { "main.py": MAIN },
    });
    receiver = await startWebhookReceiver();
  });
  after(async () => {
    await receiver.close();
    await t.close();
  });

  it("answers a sync result above the limit in full, and stores it as null with result_truncated", async () => {
    const { data, response } = await callRun(ref(), "blob", { body: { n: 20_000 } });
    assert.equal(response.status, 200);
    assert.equal((data as { result: string }).result, "x".repeat(20_000));
    const run = (await getRun(ref(), (data as { run_id: string }).run_id)).data!;
    assert.equal(run.status, "success");
    assert.equal(run.result, null);
    assert.equal(run.result_truncated, true);
  });

  it("answers a result sent as a raw payload (1 MiB and more) in full, and stores it truncated", async () => {
    const { data, response } = await callRun(ref(), "blob", { body: { n: 1_500_000 } });
    assert.equal(response.status, 200);
    assert.equal((data as { result: string }).result, "x".repeat(1_500_000));
    const run = (await getRun(ref(), (data as { run_id: string }).run_id)).data!;
    assert.equal(run.result, null);
    assert.equal(run.result_truncated, true);
  });

  it("stores a sync result within the limit whole, with result_truncated false", async () => {
    const { data } = await callRun(ref(), "blob", { body: { n: LIMIT - 2 } });
    const run = (await getRun(ref(), (data as { run_id: string }).run_id)).data!;
    assert.equal(run.result, "x".repeat(LIMIT - 2));
    assert.equal(run.result_truncated, false);
  });

  it("streams every item to the caller, and stores the first items that fit in the limit", async () => {
    const { runId, data } = await streamData(t, "chunks", { n: 50, size: 200 });
    assert.equal(data.length, 50, "the caller gets every item");
    const run = (await getRun(ref(), runId)).data!;
    assert.equal(run.mode, "stream");
    assert.equal(run.result_truncated, true);
    const kept = run.result as string[];
    assert.deepEqual(kept, data.slice(0, kept.length), "a prefix of the stream, in order");
    assert.ok(bytes(kept) <= LIMIT, `${bytes(kept)} bytes stored`);
    assert.ok(bytes([...kept, data[kept.length]]) > LIMIT, "as many items as fit are kept");
  });

  it("stores a short stream whole", async () => {
    const { runId, data } = await streamData(t, "chunks", { n: 3, size: 10 });
    const run = (await getRun(ref(), runId)).data!;
    assert.deepEqual(run.result, data);
    assert.equal(run.result_truncated, false);
  });

  it("applies the limit to async runs: a streamed and a returned result", async () => {
    const streamed = await submitAsync(ref(), "chunks", { body: { n: 50, size: 200 } });
    const returned = await submitAsync(ref(), "blob", { body: { n: 20_000 } });
    const raw = await submitAsync(ref(), "blob", { body: { n: 1_500_000 } });
    const stream = await waitForStatus(ref(), streamed, ["success"]);
    assert.equal(stream.result_truncated, true);
    assert.ok(bytes(stream.result) <= LIMIT && (stream.result as string[]).length > 0);
    for (const runId of [returned, raw]) {
      const blob = await waitForStatus(ref(), runId, ["success"]);
      assert.equal(blob.result, null);
      assert.equal(blob.result_truncated, true);
    }
  });

  it("lists runs without their results; getRun has the result", async () => {
    const { data } = await callRun(ref(), "small");
    const runId = (data as { run_id: string }).run_id;
    const page = (await listRuns(ref(), { limit: 50 })).data!;
    const listed = page.runs.find((run) => run.run_id === runId);
    assert.ok(listed, "the run is listed");
    assert.equal(listed.status, "success");
    assert.equal(listed.result_truncated, false);
    for (const run of page.runs) assert.equal("result" in run, false, `${run.run_id} is listed without a result`);
    assert.deepEqual((await getRun(ref(), runId)).data!.result, { ok: 1 });
  });

  it("caps the webhook body's result like the stored one (sync and stream)", async () => {
    const before = receiver.requests.length;
    const { data } = await callRun(ref(), "blob", { body: { n: 20_000 }, webhookEndpoint: receiver.url });
    assert.equal((data as { result: string }).result.length, 20_000);
    const stream = await streamData(t, "chunks", { n: 50, size: 200 }, `?webhookEndpoint=${receiver.url}`);
    await receiver.waitFor(before + 2);
    const bodies = receiver.requests.slice(before).map((request) => ({
      size: request.body.length,
      body: JSON.parse(request.body.toString()) as { run_id: string; result: unknown; result_truncated: boolean },
    }));
    const sync = bodies.find((b) => b.body.run_id === (data as { run_id: string }).run_id)!;
    assert.equal(sync.body.result, null);
    assert.equal(sync.body.result_truncated, true);
    assert.ok(sync.size < 1024, `sync webhook body of ${sync.size} bytes`);
    const streamed = bodies.find((b) => b.body.run_id === stream.runId)!;
    assert.equal(streamed.body.result_truncated, true);
    const kept = streamed.body.result as string[];
    assert.ok(kept.length > 0, "the webhook carries the first items that fit");
    assert.deepEqual(kept, stream.data.slice(0, kept.length));
    assert.ok(bytes(kept) <= LIMIT);
    assert.ok(streamed.size <= LIMIT + 1024, `stream webhook body of ${streamed.size} bytes`);
  });
});

describe("the stored form of a result", () => {
  it("measures a value against the limit without encoding one that is clearly bigger", () => {
    const huge = "y".repeat(10_000_000);
    let encoded = false;
    const watched = { toJSON: () => ((encoded = true), huge) };
    assert.deepEqual(storedResult({ text: huge, watched }, 1024), { json: null, truncated: true });
    assert.equal(encoded, false, "a value bigger than the limit by its strings alone is not encoded");
    assert.deepEqual(storedResult({ a: [1, "é"] }, 1024), { json: '{"a":[1,"é"]}', truncated: false });
    assert.deepEqual(storedResult("é".repeat(600), 1024), { json: null, truncated: true });
    assert.deepEqual(storedResult(null, 4), { json: "null", truncated: false });
  });

  it("keeps a worker's raw JSON text as it is when it fits, by its length alone when it does not", () => {
    const text = '{"a":[1,2,"\\u00e9"]}';
    const raw = new RawJson([Buffer.from(text.slice(0, 5)), Buffer.from(text.slice(5))], text.length);
    assert.deepEqual(storedResult(raw, 1024), { json: text, truncated: false });
    assert.deepEqual(storedResult(raw, text.length - 1), { json: null, truncated: true });
    assert.equal(JSON.stringify({ result: raw }), `{"result":{"a":[1,2,"é"]}}`);
  });
});

/** The open descriptors of this process that point at a deleted runplane spill file. */
function openSpillFiles(): number {
  return readdirSync("/proc/self/fd").filter((fd) => {
    try {
      return /runplane-spill-.* \(deleted\)$/.test(readlinkSync(`/proc/self/fd/${fd}`));
    } catch {
      return false; // the descriptor readdir itself used, closed since
    }
  }).length;
}

describe("a stream's stored items", () => {
  const item = (i: number) => ({ i, text: "z".repeat(1000) });

  it("keeps every item that fits, in order, across what it set aside on disk", () => {
    const stored = new StoredItems(1024 * 1024);
    const items = Array.from({ length: 300 }, (_, i) => item(i));
    for (const value of items) stored.add(value);
    assert.equal(openSpillFiles(), 1, "300 KB of items spill past the 64 KiB held in memory");
    assert.deepEqual(stored.result(), { json: JSON.stringify(items), truncated: false });
    assert.equal(openSpillFiles(), 0, "reading the result frees the file");
  });

  it("keeps a worker's raw items and encoded ones byte for byte, in order, across a spill", () => {
    const stored = new StoredItems(1024 * 1024);
    const expected: unknown[] = [];
    const texts: string[] = [];
    for (let i = 0; i < 200; i++) {
      const value = { i, text: "é€𝄞".repeat(100 + i) };
      if (i % 3 === 0) {
        // A worker's raw JSON is ASCII: its other characters escaped.
        const text = JSON.stringify(value).replace(
          /[^\x00-\x7f]/g,
          (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
        );
        const bytes = Buffer.from(text);
        stored.add(new RawJson([bytes.subarray(0, 7), bytes.subarray(7)], bytes.length));
        texts.push(text);
      } else {
        stored.add(value);
        texts.push(JSON.stringify(value));
      }
      expected.push(value);
    }
    assert.equal(openSpillFiles(), 1, "past the 64 KiB held in memory");
    const { json, truncated } = stored.result();
    assert.equal(truncated, false);
    assert.deepEqual(JSON.parse(json!), expected);
    assert.equal(json, `[${texts.join(",")}]`);
  });

  it("stores a prefix of the stream when the limit is reached after a spill", () => {
    const stored = new StoredItems(200_000);
    for (let i = 0; i < 300; i++) stored.add(item(i));
    const { json, truncated } = stored.result();
    assert.equal(truncated, true);
    const kept = JSON.parse(json!) as { i: number }[];
    assert.ok(Buffer.byteLength(json!) <= 200_000);
    assert.ok(kept.length > 150, `kept ${kept.length} items`);
    assert.deepEqual(kept.map((k) => k.i), Array.from({ length: kept.length }, (_, i) => i));
  });

  it("drops what it set aside when closed, and keeps nothing added after", () => {
    const stored = new StoredItems(1024 * 1024);
    for (let i = 0; i < 100; i++) stored.add(item(i));
    assert.equal(openSpillFiles(), 1);
    stored.close();
    assert.equal(openSpillFiles(), 0);
    for (let i = 0; i < 100; i++) stored.add(item(i));
    assert.equal(openSpillFiles(), 0);
  });

  it("stores a shorter prefix, and lets the stream go on, when nothing can be set aside on disk", () => {
    const tmp = process.env.TMPDIR;
    process.env.TMPDIR = "/nonexistent/runplane-test";
    try {
      const stored = new StoredItems(1024 * 1024);
      for (let i = 0; i < 300; i++) stored.add(item(i));
      const { json, truncated } = stored.result();
      assert.equal(truncated, true);
      const kept = JSON.parse(json!) as { i: number }[];
      assert.ok(kept.length >= 60, `the items held in memory are kept (${kept.length})`);
      assert.deepEqual(kept.map((k) => k.i), Array.from({ length: kept.length }, (_, i) => i));
    } finally {
      if (tmp === undefined) delete process.env.TMPDIR;
      else process.env.TMPDIR = tmp;
    }
  });

  it("never leaves its file where another process could open it", () => {
    const spill = new SpillFile();
    spill.append("secret");
    assert.deepEqual(readdirSync(tmpdir()).filter((name) => name.startsWith(`runplane-spill-${process.pid}-`)), []);
    assert.equal(spill.take(), "secret");
    assert.equal(openSpillFiles(), 0);
  });
});
