import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  createRunplaneClient,
  isConnectionFailure,
  MAX_RETRY_AFTER_MS,
  RunplaneConnectionError,
  RunplaneError,
  retryDelayMs,
} from "../../client/mod.ts";
import { deployApp } from "../_helpers/apps.ts";
import { runMain } from "../_helpers/cli.ts";
import { contractCheckedFetch, createCheckedRunplaneClient } from "../_helpers/runplane_client.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { type Fault, type FaultProxy, type SeenRequest, startFaultProxy } from "./_fault_proxy.ts";

/** The Python app the client tests deploy. */
const MAIN = readFileSync(join(import.meta.dirname, "_fixtures", "client_app.py"), "utf8");
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The address of a loopback port nothing listens on any more. */
async function closedUrl(): Promise<string> {
  const gone = await startFaultProxy("http://127.0.0.1:9", { fault: () => undefined });
  await gone.close();
  return gone.url;
}

/** The run calls (`POST /v4/{project}/{app}/{function}`) among the requests a proxy saw. */
function submissions(seen: SeenRequest[]): SeenRequest[] {
  return seen.filter((request) => request.method === "POST" && request.path.startsWith(`/v4/${TEST_PROJECT}/`));
}

describe("retryDelayMs and isConnectionFailure", () => {
  it("waits a 503's Retry-After (seconds or a date), at most MAX_RETRY_AFTER_MS, else 200 to 500 ms", () => {
    const after = (value: string) => new Response(null, { status: 503, headers: { "Retry-After": value } });
    assert.equal(retryDelayMs(after("2")), 2000);
    assert.equal(retryDelayMs(after("0")), 0);
    assert.equal(retryDelayMs(after("3600")), MAX_RETRY_AFTER_MS);
    const now = Date.parse("2026-01-01T00:00:00Z");
    assert.equal(retryDelayMs(after("Thu, 01 Jan 2026 00:00:03 GMT"), { now }), 3000);
    assert.equal(retryDelayMs(after("Thu, 01 Jan 2026 00:00:00 GMT"), { now: now + 10_000 }), 0);
    assert.equal(retryDelayMs(after("soon"), { random: () => 0 }), 200);
    assert.equal(retryDelayMs(undefined, { random: () => 0 }), 200);
    assert.equal(retryDelayMs(undefined, { random: () => 1 }), 500);
  });

  it("tells a refused connection from an aborted call", async () => {
    const refused = await fetch(`${await closedUrl()}/healthz`).catch((error: unknown) => error);
    assert.ok(isConnectionFailure(refused), `a refused connection: ${refused}`);
    // Refused twice, the submission never reached a server: no run can exist, so no key to chase.
    const nobody = createRunplaneClient({ baseUrl: await closedUrl() });
    const submitted = await nobody.runAsync(`${TEST_PROJECT}/py`).catch((error: unknown) => error);
    assert.ok(
      submitted instanceof TypeError && submitted.message === "fetch failed" && isConnectionFailure(submitted),
      `refused twice: ${submitted}`,
    );
    const aborted = await fetch("http://127.0.0.1:9/", { signal: AbortSignal.abort() }).catch((error: unknown) =>
      error
    );
    assert.equal(isConnectionFailure(aborted), false);
    assert.equal(isConnectionFailure(new TypeError("Invalid URL")), false);
  });
});

describe("safe retries against a real server behind a faulty proxy", { timeout: 180_000 }, () => {
  let t: TestServer;
  const proxies: FaultProxy[] = [];
  before(async () => {
    // The tests are about the client's connection, not the jail (test/sandbox/ covers it).
    t = await startTestServer({ env: { RUNPLANE_SANDBOX: "off" } });
  });
  after(async () => {
    await Promise.all(proxies.map((proxy) => proxy.close()));
    await t.close();
  });

  /** Deploys the fixture as `p-test/<name>`: each test counts the runs of its own app. */
  async function freshApp(name: string): Promise<string> {
    await deployApp(t, name, { toml: "[scaling]\nmax_replicas = 1\n", files: { "main.py": MAIN } });
    return `${TEST_PROJECT}/${name}`;
  }

  /** A proxy to the test server that applies `faults[i]` to its i-th run call (and `getFault` to the rest). */
  async function proxyWith(faults: Array<Fault | undefined>, other?: (method: string) => Fault | undefined) {
    let calls = 0;
    const proxy = await startFaultProxy(t.url, {
      fault(request) {
        if (request.method === "POST" && request.url!.startsWith(`/v4/${TEST_PROJECT}/`)) return faults[calls++];
        return other?.(request.method!);
      },
    });
    proxies.push(proxy);
    return proxy;
  }

  function clientThrough(proxy: FaultProxy) {
    return createRunplaneClient({ baseUrl: proxy.url, apiUrl: proxy.url, token: t.token, fetch: contractCheckedFetch });
  }

  /** Every run of `app`, read from the server directly through the validating client. */
  async function runsOf(app: string) {
    const { data, response } = await t.client.GET("/v4/projects/{project_id}/apps/{app_id}/runs", {
      params: { path: { project_id: TEST_PROJECT, app_id: app.split("/")[1] }, query: { limit: 200 } },
    });
    assert.equal(response.status, 200);
    return data!.runs;
  }

  it("runAsync() whose connection is reset after the server committed the run retries with the same key: one run", async () => {
    const app = await freshApp("reset-once");
    const proxy = await proxyWith(["reset"]);
    const runId = await clientThrough(proxy).runAsync(app, { name: "Ada" });
    const sent = submissions(proxy.seen);
    assert.deepEqual(sent.map((request) => request.fault), ["reset", undefined]);
    assert.match(sent[0].idempotencyKey ?? "", UUID);
    assert.equal(sent[1].idempotencyKey, sent[0].idempotencyKey);
    // The first attempt's run was committed before its answer was cut off: the retry answered with it.
    assert.deepEqual((await runsOf(app)).map((run) => run.run_id), [runId]);
    assert.deepEqual(await proxy.contractErrors(), []);
  });

  it("retries only what is safe: a reset GET and a keyed sync run are retried, a sync run without a key is not", async () => {
    const app = await freshApp("safe-only");
    let getsReset = 0;
    const proxy = await proxyWith(
      ["reset", undefined, "reset"],
      (method) => method === "GET" && getsReset++ === 0 ? "reset" : undefined,
    );
    const client = clientThrough(proxy);
    const keyed = await client.run(app, { name: "Bo" }, { idempotencyKey: "sync-key-1" });
    assert.deepEqual(keyed.result, { message: "Hello, Bo!" });
    // The retry found the finished run by its key and answered its stored result.
    assert.equal((await client.getRun(keyed.run_id)).run_id, keyed.run_id);
    assert.equal(getsReset, 2, "the first GET was reset and sent again");
    const unkeyed = await client.run(app, { name: "Cy" }).catch((error: unknown) => error);
    assert.ok(unkeyed instanceof TypeError && isConnectionFailure(unkeyed), `a reset sync call: ${unkeyed}`);
    const sent = submissions(proxy.seen);
    assert.deepEqual(sent.map((request) => [request.idempotencyKey, request.fault]), [
      ["sync-key-1", "reset"],
      ["sync-key-1", undefined],
      [undefined, "reset"],
    ]);
    // Both sync calls ran once each: the unkeyed one was not sent again.
    assert.equal((await runsOf(app)).length, 2);
    assert.deepEqual(await proxy.contractErrors(), []);
  });

  it("a 503 with Retry-After is retried once, after the wait it asks; a second 503 is the answer", async () => {
    const app = await freshApp("busy-once");
    const proxy = await proxyWith([{ status: 503, retryAfter: 2 }, undefined, { status: 503, retryAfter: 1 }, {
      status: 503,
      retryAfter: 1,
    }]);
    const client = clientThrough(proxy);
    const started = performance.now();
    const runId = await client.runAsync(app, { name: "Di" });
    // A lower bound only: the retry waited out Retry-After, not its usual 200-500 ms.
    assert.ok(performance.now() - started >= 1900, `retried after ${performance.now() - started} ms`);
    const busy = await client.runAsync(app, { name: "Ed" }).catch((error: unknown) => error);
    assert.ok(busy instanceof RunplaneError && busy.status === 503, `two 503s: ${busy}`);
    const sent = submissions(proxy.seen);
    assert.equal(sent.length, 4, "each submission was sent twice, no more");
    assert.equal(sent[1].idempotencyKey, sent[0].idempotencyKey);
    assert.equal(sent[3].idempotencyKey, sent[2].idempotencyKey);
    assert.notEqual(sent[2].idempotencyKey, sent[0].idempotencyKey, "each submission has its own key");
    assert.deepEqual((await runsOf(app)).map((run) => run.run_id), [runId]);
    assert.deepEqual(await proxy.contractErrors(), []);
  });

  it("when the retry's connection breaks too, the error names the key, and sending the key again finds the one run", async () => {
    const app = await freshApp("reset-twice");
    const proxy = await proxyWith(["reset", "close"]);
    const error = await clientThrough(proxy).runAsync(app, { name: "Flo" }).catch((failure: unknown) => failure);
    assert.ok(error instanceof RunplaneConnectionError, `expected a RunplaneConnectionError, got ${error}`);
    const sent = submissions(proxy.seen);
    assert.equal(sent.length, 2);
    assert.equal(error.idempotencyKey, sent[0].idempotencyKey);
    assert.equal(sent[1].idempotencyKey, sent[0].idempotencyKey);
    assert.equal(error.code, "UND_ERR_SOCKET");
    assert.ok(error.message.includes(`Idempotency-Key ${error.idempotencyKey}`), error.message);
    // The run was made on the first attempt; the key gets it back without making another.
    const direct = createCheckedRunplaneClient(t.url, t.token);
    const runId = await direct.runAsync(app, { name: "Flo" }, { idempotencyKey: error.idempotencyKey });
    assert.deepEqual((await runsOf(app)).map((run) => run.run_id), [runId]);
    assert.deepEqual(await proxy.contractErrors(), []);
  });

  it("runplane run --async sends a key and retries with it after a reset; --json prints it; a failure names it", async () => {
    const app = await freshApp("cli-async");
    const proxy = await proxyWith(["reset", undefined, "reset", undefined, "reset", "reset"]);
    const env = { RUNPLANE_BASE_URL: proxy.url, RUNPLANE_TOKEN: t.token };
    const plain = await runMain(["run", app, "--async", "--data", '{"name": "Gus"}'], { env });
    assert.equal(plain.code, 0, plain.stderr);
    const given = await runMain(["run", app, "--async", "--json", "--idempotency-key", "cli-key-1"], { env });
    assert.equal(given.code, 0, given.stderr);
    const printed = JSON.parse(given.stdout) as { run_id: string; idempotency_key: string };
    assert.equal(printed.idempotency_key, "cli-key-1");
    const failed = await runMain(["run", app, "--async"], { env });
    assert.equal(failed.code, 1);
    const sent = submissions(proxy.seen);
    assert.equal(sent.length, 6);
    assert.match(sent[0].idempotencyKey ?? "", UUID);
    assert.equal(sent[1].idempotencyKey, sent[0].idempotencyKey);
    assert.deepEqual([sent[2].idempotencyKey, sent[3].idempotencyKey], ["cli-key-1", "cli-key-1"]);
    const lostKey = sent[4].idempotencyKey!;
    assert.equal(sent[5].idempotencyKey, lostKey);
    assert.ok(failed.stderr.includes(`--idempotency-key ${lostKey}`), failed.stderr);
    // Three submissions, three runs: the reset first attempts were answered by their retries' keys.
    const runs = await runsOf(app);
    assert.equal(runs.length, 3);
    assert.ok(runs.some((run) => run.run_id === plain.stdout.trim()));
    assert.ok(runs.some((run) => run.run_id === printed.run_id));
    // Repeating the failed command with the key it printed gets the run it made, not a fourth.
    const repeated = await runMain(["run", app, "--async", "--idempotency-key", lostKey], {
      env: { RUNPLANE_BASE_URL: t.url, RUNPLANE_TOKEN: t.token },
    });
    assert.equal(repeated.code, 0, repeated.stderr);
    assert.equal((await runsOf(app)).length, 3);
    assert.deepEqual(await proxy.contractErrors(), []);
  });
});
