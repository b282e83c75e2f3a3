import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { createLogger } from "../../server/log.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

function capture(): { lines: string[]; destination: Writable } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { lines, destination };
}

describe("log redaction", () => {
  it("redacts tokens, secrets and Authorization headers whatever a caller logs", () => {
    const { lines, destination } = capture();
    const logger = createLogger({ level: "info", destination });
    logger.info({
      token: "tok-1",
      secret: "sec-1",
      headers: { authorization: "Bearer tok-2", "x-webhook-secret": "sec-2" },
    }, "m");
    logger.info({ req: { headers: { authorization: "Bearer tok-3" } }, webhook: { secret: "sec-3" } }, "m");
    const text = lines.join("");
    for (const value of ["tok-1", "sec-1", "tok-2", "sec-2", "tok-3", "sec-3"]) assert.ok(!text.includes(value), value);
    assert.match(text, /\[redacted\]/);
  });
});

describe("request logs", () => {
  let t: TestServer;
  before(async () => {
    t = await startTestServer();
  });
  after(() => t.close());

  it("log each request once with request id, operation, status and duration, and no token or secret", async () => {
    const response = await checkedFetch(`${t.url}/v3/projects/${TEST_PROJECT}/apps/a/base-image`, {
      method: "POST",
      headers: {
        Authorization: `Bearer ${t.token}`,
        "Content-Type": "application/json",
        "X-Webhook-Secret": "never-logged-secret",
      },
      body: "{}",
    });
    assert.equal(response.status, 200);
    const requestId = response.headers.get("x-request-id");
    await new Promise((r) => setTimeout(r, 50));
    const lines = t.logs.filter((l) => l.msg === "request" && l.req_id === requestId);
    assert.equal(lines.length, 1);
    assert.equal(lines[0].operationId, "createBaseImageHash");
    assert.equal(lines[0].status, 200);
    assert.equal(typeof lines[0].duration_ms, "number");
    assert.ok(!t.rawLogs().includes(t.token), "no token in the logs");
    assert.ok(!t.rawLogs().includes("never-logged-secret"), "no secret in the logs");
  });
});
