import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { routes } from "../../generated/routes.ts";
import { checkResponse } from "../../server/http/mod.ts";

const hash = routes.find((r) => r.operationId === "createBaseImageHash")!;
const ok = { "x-request-id": "req_1" };

describe("checkResponse", () => {
  it("accepts a response that matches the contract", () => {
    const body = { digest: `sha256:${"a".repeat(64)}`, status: "new" };
    assert.deepEqual(checkResponse(hash, { status: 200, headers: ok, contentType: "application/json", body }), []);
  });

  it("reports a body that does not match", () => {
    const body = { digest: "md5:abc", status: "fresh" };
    const problems = checkResponse(hash, { status: 200, headers: ok, contentType: "application/json", body });
    assert.equal(problems.length, 2);
  });

  it("reports an undeclared status, a wrong content type and a missing header", () => {
    assert.match(
      checkResponse(hash, { status: 418, headers: ok, contentType: "application/json", body: {} })[0],
      /not declared/,
    );
    assert.match(
      checkResponse(hash, { status: 200, headers: ok, contentType: "text/html", body: "" })[0],
      /content type/,
    );
    const body = { digest: `sha256:${"a".repeat(64)}`, status: "new" };
    assert.match(
      checkResponse(hash, { status: 200, headers: {}, contentType: "application/json", body })[0],
      /x-request-id/,
    );
  });
});
