import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { createRunplaneClient, isRunplaneError, RunplaneError } from "../../client/mod.ts";
import { contractCheckedFetch, createCheckedRunplaneClient } from "../_helpers/runplane_client.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

const RUN_ID = "run_0123456789abcdefghijklmnop";

async function rejection(promise: Promise<unknown>): Promise<RunplaneError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(isRunplaneError(error), `expected a RunplaneError, got ${error}`);
    return error;
  }
  assert.fail("expected the call to fail");
}

describe("createRunplaneClient against a real server", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  it("refuses to start without an address", () => {
    assert.throws(() => createRunplaneClient({ token: "x" }), /baseUrl.*apiUrl/);
  });

  it("hashes base-image dependencies: new, then cached", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const request = { aptPackages: ["curl"], shellCommands: [Buffer.from("echo hi").toString("base64")] };
    const first = await client.baseImageHash(`${TEST_PROJECT}/client-app`, request);
    const second = await client.baseImageHash({ project: TEST_PROJECT, app: "client-app" }, request);
    assert.match(first.digest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(first.status, "new");
    assert.deepEqual(second, { digest: first.digest, status: "cached" });
  });

  it("throws a RunplaneError with the problem's field errors for a 400", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.baseImageHash(`${TEST_PROJECT}/client-app`, { shellCommands: ["not base64!"] }));
    assert.equal(error.status, 400);
    assert.deepEqual(error.problem.errors?.map((e) => e.path), ["body.shellCommands[0]"]);
    assert.match(error.requestId ?? "", /.+/);
    assert.equal(error.runId, undefined);
  });

  it("throws a 401 RunplaneError without a token", async () => {
    const client = createCheckedRunplaneClient(t.url);
    const error = await rejection(client.listRuns(`${TEST_PROJECT}/app`));
    assert.equal(error.status, 401);
    assert.equal(error.problem.status, 401);
    assert.match(error.message, /^Authentication required/);
  });

  it("throws a 403 RunplaneError for another project's app", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.baseImageHash("someone-else/app", {}));
    assert.equal(error.status, 403);
  });

  it("sends every run-API call to the contract's operations (501 until the runtime lands)", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const app = `${TEST_PROJECT}/hello`;
    const calls: Array<[string, () => Promise<unknown>]> = [
      ["runFunction", () => client.run(app, { name: "Ada" }, { idempotencyKey: "k1", webhookEndpoint: "https://example.com/hook", webhookSecret: "s" })],
      ["runFunction", () => client.runAsync(`${app}/other`, {})],
      ["getRun", () => client.getRun(app, RUN_ID)],
      ["getRun", () => client.waitForRun(app, RUN_ID)],
      ["listRuns", () => client.listRuns(app, { status: "success", limit: 10 })],
      ["cancelRun", () => client.cancelRun(app, RUN_ID)],
    ];
    for (const [operation, call] of calls) {
      const error = await rejection(call());
      // The route was found and authorised (not 404/401/400): the server names the operation.
      assert.equal(error.status, 501, `${operation}: ${error.message}`);
      assert.match(error.problem.detail ?? "", new RegExp(operation));
    }
  });

  it("surfaces a stream call's failure as a RunplaneError when iterated", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const stream = client.stream(`${TEST_PROJECT}/hello/counter`, { n: 3 });
    const error = await rejection((async () => {
      for await (const _ of stream) assert.fail("no item expected");
    })());
    assert.equal(error.status, 501);
    assert.match(error.problem.detail ?? "", /runFunction/);
  });

  it("rejects a malformed app reference before calling", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    await assert.rejects(client.run("just-a-project", {}), /Invalid app reference "just-a-project"/);
  });

  it("validates path parameters on the server: a bad run id is a 400", async () => {
    const client = createCheckedRunplaneClient(t.url, t.token);
    const error = await rejection(client.getRun(`${TEST_PROJECT}/app`, "not-a-run-id"));
    assert.equal(error.status, 400);
    assert.ok(error.problem.errors?.some((e) => e.path === "path.run_id"));
  });

  it("reads the system operations: jwks, health, readiness and metrics", async () => {
    const client = createRunplaneClient({ apiUrl: t.url, fetch: contractCheckedFetch });
    const jwks = await client.jwks();
    assert.equal(jwks.keys[0].kty, "OKP");
    assert.deepEqual(await client.health(), { status: "ok" });
    assert.deepEqual(await client.readiness(), { status: "ready" });
    assert.match(await client.metrics(), /# TYPE /);
  });

  it("sends run calls to baseUrl and REST calls to apiUrl", async () => {
    const seen: string[] = [];
    const client = createRunplaneClient({
      baseUrl: `${t.url}/`,
      apiUrl: t.url.replace("127.0.0.1", "localhost"),
      token: t.token,
      fetch(request) {
        seen.push(new URL(request.url).host);
        return contractCheckedFetch(request);
      },
    });
    await rejection(client.run(`${TEST_PROJECT}/hello`, {}));
    await client.baseImageHash(`${TEST_PROJECT}/hello`, {});
    const port = new URL(t.url).port;
    assert.deepEqual(seen, [`127.0.0.1:${port}`, `localhost:${port}`]);
  });
});
