import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { deployApp } from "../_helpers/apps.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";
import { waitForStatus } from "../_helpers/runs.ts";

const MAIN = `
def echo(**kwargs):
    return {name: repr(value) for name, value in kwargs.items()}

def hello(name="world"):
    return f"hello {name}"
`;

describe("request bodies reach the function as sent, and nesting is bounded at the edge", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
    await deployApp(t, "body", {
      toml: "[scaling]\nmax_replicas = 1\nreplica_concurrency = 1\nresponse_grace_period = 30\n",
      files: { "main.py": MAIN },
    });
  });
  after(() => t.close());

  function post(path: string, body: string) {
    return fetch(`${t.url}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body,
    });
  }

  it("a 3,000-deep body is a 400 naming the limit, and the next call to the same app succeeds", async () => {
    const deep = `{"name": ${"[".repeat(3000)}${"]".repeat(3000)}}`;
    const refused = await post(`/v4/${TEST_PROJECT}/body/hello`, deep);
    assert.equal(refused.status, 400);
    assert.equal(refused.headers.get("content-type"), "application/problem+json");
    const problem = await refused.json() as { type: string; detail: string };
    assert.equal(problem.type, "https://runplane.dev/problems/bad-request");
    assert.match(problem.detail, /deeper than 512 levels/);
    const next = await post(`/v4/${TEST_PROJECT}/body/hello`, '{"name": "again"}');
    assert.equal(next.status, 200);
    assert.equal((await next.json() as { result: string }).result, "hello again");
  });

  it("512 levels are accepted and 513 are refused, on another operation too", async () => {
    const nested = (levels: number) => `{"name": ${"[".repeat(levels - 1)}${"]".repeat(levels - 1)}}`;
    const ok = await post(`/v4/${TEST_PROJECT}/body/echo`, nested(512));
    assert.equal(ok.status, 200);
    assert.equal((await post(`/v4/${TEST_PROJECT}/body/echo`, nested(513))).status, 400);
    const other = await post(`/v3/projects/${TEST_PROJECT}/apps/body/base-image`, nested(600));
    assert.equal(other.status, 400);
    assert.match((await other.json() as { detail: string }).detail, /deeper than 512 levels/);
  });

  it("1e400 and 2^60 reach Python as Python reads the text", async () => {
    const answer = await post(`/v4/${TEST_PROJECT}/body/echo`, '{"big": 1e400, "exact": 1152921504606846976}');
    assert.equal(answer.status, 200);
    const { result } = await answer.json() as { result: Record<string, string> };
    assert.deepEqual(result, { big: "inf", exact: "1152921504606846976" });
  });

  it("an async run stores and forwards the body as sent", async () => {
    const answer = await post(`/v4/${TEST_PROJECT}/body/echo?async=true`, '{"exact": 1152921504606846977}');
    assert.equal(answer.status, 202);
    const { run_id } = await answer.json() as { run_id: string };
    const run = await waitForStatus({ client: t.client, project: TEST_PROJECT, app: "body" }, run_id, ["success"]);
    assert.deepEqual(run.result, { exact: "1152921504606846977" });
  });
});
