import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { checkedFetch } from "../_helpers/contract.ts";
import { rawRequest } from "../_helpers/raw_http.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

describe("HTTP layer problems", () => {
  let t: TestServer;
  let url: string;
  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_BODY_LIMIT: "1kb" } });
    url = `${t.url}/v3/projects/${TEST_PROJECT}/apps/a/base-image`;
  });
  after(() => t.close());

  function post(body: string, contentType = "application/json") {
    return checkedFetch(url, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": contentType },
      body,
    });
  }

  async function problem(response: Response) {
    assert.equal(response.headers.get("content-type"), "application/problem+json");
    assert.match(response.headers.get("x-request-id") ?? "", /^req_/);
    return (await response.json()) as { type: string; status: number; detail: string; errors?: unknown[] };
  }

  it("answers 400 for malformed JSON", async () => {
    const response = await post("{bad");
    assert.equal(response.status, 400);
    const body = await problem(response);
    assert.equal(body.type, "https://runplane.dev/problems/malformed-json");
  });

  it("answers a well-formed JSON scalar with the validation problem of an array, not malformed-json", async () => {
    const array = await post("[1,2]");
    assert.equal(array.status, 400);
    const expected = await problem(array);
    assert.equal(expected.type, "https://runplane.dev/problems/validation");
    for (const scalar of ["5", '"text"', "null", "true", " -1.5e3 "]) {
      const response = await post(scalar);
      assert.equal(response.status, 400, scalar);
      const body = await problem(response);
      assert.equal(body.type, expected.type, scalar);
      assert.deepEqual(body.errors, expected.errors, scalar);
    }
    for (const malformed of ["5x", "'text'", "nul"]) {
      const response = await post(malformed);
      assert.equal((await problem(response)).type, "https://runplane.dev/problems/malformed-json", malformed);
    }
  });

  it("answers 413 for a body over the limit", async () => {
    const response = await post(JSON.stringify({ aptPackages: ["x".repeat(2000)] }));
    assert.equal(response.status, 413);
    assert.match((await problem(response)).detail, /limit/);
  });

  it("answers 415 for another content type", async () => {
    const response = await post("aptPackages=x", "application/x-www-form-urlencoded");
    assert.equal(response.status, 415);
    assert.match((await problem(response)).detail, /application\/json/);
  });

  it("answers 400 when a required body is absent", async () => {
    const response = await checkedFetch(url, { method: "POST", headers: { Authorization: `Bearer ${t.token}` } });
    assert.equal(response.status, 400);
    assert.deepEqual((await problem(response)).errors, [{ path: "body", message: "is required: send a JSON object" }]);
  });

  it("lists every failing parameter", async () => {
    const response = await checkedFetch(`${t.url}/v4/projects/${TEST_PROJECT}/apps/a/runs?limit=0&status=bogus`, {
      headers: { Authorization: `Bearer ${t.token}` },
    });
    assert.equal(response.status, 400);
    const paths = ((await problem(response)).errors as Array<{ path: string }>).map((e) => e.path).sort();
    assert.deepEqual(paths, ["query.limit", "query.status"]);
  });

  it("answers 400 for a path parameter outside its pattern", async () => {
    const response = await checkedFetch(`${t.url}/v3/projects/NOT_VALID/apps/a/base-image`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    // The token's project is checked first: a foreign project id is 403 whatever its spelling.
    assert.equal(response.status, 403);
  });

  it("answers 404 for an unknown route and 405 for a wrong method", async () => {
    const missing = await checkedFetch(`${t.url}/v9/nothing`);
    assert.equal(missing.status, 404);
    assert.equal((await problem(missing)).type, "https://runplane.dev/problems/not-found");
    const wrong = await checkedFetch(url, { method: "GET" });
    assert.equal(wrong.status, 405);
    assert.equal(wrong.headers.get("allow"), "POST");
    await problem(wrong);
  });

  it("answers 400 for a path that is not valid percent-encoding", async () => {
    const response = await checkedFetch(`${t.url}/v4/${TEST_PROJECT}/a/f%ZZ`, {
      method: "POST",
      headers: { Authorization: `Bearer ${t.token}`, "Content-Type": "application/json" },
      body: "{}",
    });
    assert.equal(response.status, 400);
    assert.match((await problem(response)).detail, /percent-encoding/);
  });

  it("sends X-Request-Id on success too", async () => {
    const response = await checkedFetch(`${t.url}/healthz`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get("x-request-id") ?? "", /^req_/);
  });
});

describe("HTTP layer problems for what fetch cannot send", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  function runRequest(extra: string[], body = "{}"): string[] {
    return [
      `POST /v4/${TEST_PROJECT}/no-such-app/run?webhookEndpoint=https%3A%2F%2Fhooks.example.com%2Fx HTTP/1.1`,
      `Host: ${new URL(t.url).host}`,
      `Authorization: Bearer ${t.token}`,
      "Content-Type: application/json",
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...extra,
    ];
  }

  for (const name of ["X-Webhook-Secret", "Idempotency-Key"]) {
    it(`refuses ${name} sent twice with a 400 problem naming it`, async () => {
      const response = await rawRequest(t.url, runRequest([`${name}: a`, `${name}: b`]), "{}");
      assert.equal(response.status, 400);
      assert.equal(response.headers["content-type"], "application/problem+json");
      assert.match(response.headers["x-request-id"] ?? "", /^req_/);
      const problem = JSON.parse(response.body) as { type: string; errors: Array<{ path: string; message: string }> };
      assert.equal(problem.type, "https://runplane.dev/problems/validation");
      assert.deepEqual(problem.errors, [{ path: `header.${name}`, message: "was sent 2 times; send it once" }]);
    });
  }

  it("accepts a secret with a comma sent once (the call goes on to the missing app)", async () => {
    const response = await rawRequest(t.url, runRequest(["X-Webhook-Secret: a, b"]), "{}");
    assert.equal(response.status, 404);
  });
});

describe("answers of Node's HTTP parser", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  function assertParserProblem(response: { status: number; headers: Record<string, string>; body: string }) {
    assert.equal(response.headers["content-type"], "application/problem+json");
    assert.match(response.headers["x-request-id"] ?? "", /^req_[A-Za-z0-9_-]{16}$/);
    const problem = JSON.parse(response.body) as { type: string; status: number; title: string; detail: string };
    assert.equal(problem.status, response.status);
    assert.ok(problem.title && problem.detail);
    return problem;
  }

  it("431 with a problem and X-Request-Id for headers over 16 KiB", async () => {
    const host = new URL(t.url).host;
    const response = await rawRequest(t.url, [
      "GET /healthz HTTP/1.1",
      `Host: ${host}`,
      `X-Big: ${"a".repeat(17_000)}`,
    ]);
    assert.equal(response.status, 431);
    const problem = assertParserProblem(response);
    assert.equal(problem.type, "https://runplane.dev/problems/request-header-fields-too-large");
    assert.match(problem.detail, /16384 bytes/);
  });

  it("431 for many headers adding up to more than 16 KiB", async () => {
    const host = new URL(t.url).host;
    const many = Array.from({ length: 3000 }, (_, i) => `X-H${i}: ${i}`);
    const response = await rawRequest(t.url, ["GET /healthz HTTP/1.1", `Host: ${host}`, ...many]);
    assert.equal(response.status, 431);
    assertParserProblem(response);
  });

  it("400 with a problem and X-Request-Id for two Content-Lengths", async () => {
    const host = new URL(t.url).host;
    const response = await rawRequest(
      t.url,
      ["POST /healthz HTTP/1.1", `Host: ${host}`, "Content-Length: 2", "Content-Length: 3"],
      "{}",
    );
    assert.equal(response.status, 400);
    const problem = assertParserProblem(response);
    assert.equal(problem.type, "https://runplane.dev/problems/bad-request");
  });

  it("logs each refusal with its request id, and the server keeps answering", async () => {
    const host = new URL(t.url).host;
    const response = await rawRequest(t.url, [
      "GET /healthz HTTP/1.1",
      `Host: ${host}`,
      `X-Big: ${"a".repeat(17_000)}`,
    ]);
    const id = response.headers["x-request-id"];
    assert.ok(t.logs.some((line) => line.req_id === id && line.msg === "request refused by the HTTP parser"));
    const healthy = await fetch(`${t.url}/healthz`);
    assert.equal(healthy.status, 200);
  });
});
