import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { staleGenerated } from "../../scripts/check.ts";
import { generateArtifacts } from "../../scripts/generate.ts";

describe("npm run generate", () => {
  // Two runs of the generator (each compiles the whole spec), shared by the tests below.
  let first: Map<string, string>;
  let second: Map<string, string>;
  before(async () => {
    first = await generateArtifacts();
    second = await generateArtifacts();
  });

  it("is deterministic: two runs produce identical bytes", () => {
    assert.deepEqual([...first.keys()], [...second.keys()]);
    for (const [name, contents] of first) assert.equal(second.get(name), contents, name);
  });

  it("leaves generated/ unchanged: the committed files are what spec/ produces", async () => {
    assert.deepEqual(await staleGenerated({ artifacts: first }), []);
  });

  it("emits OpenAPI 3.1 with an operationId, bearer auth and problem responses on every operation", () => {
    const document = JSON.parse(first.get("openapi.json")!) as {
      openapi: string;
      security: unknown;
      paths: Record<
        string,
        Record<
          string,
          {
            operationId?: string;
            security?: unknown[];
            responses: Record<string, { content?: Record<string, unknown> }>;
          }
        >
      >;
      webhooks?: Record<string, unknown>;
    };
    assert.equal(document.openapi, "3.1.0");
    assert.deepEqual(document.security, [{ BearerAuth: [] }]);
    assert.ok(document.webhooks?.runFinished, "the webhook delivery is described");
    for (const [path, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        assert.ok(operation.operationId, `${method} ${path} has an operationId`);
        for (const [status, response] of Object.entries(operation.responses)) {
          if (Number(status) >= 400) {
            assert.deepEqual(
              Object.keys(response.content ?? {}),
              ["application/problem+json"],
              `${operation.operationId} ${status}`,
            );
          }
        }
      }
    }
  });
});
