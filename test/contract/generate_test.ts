import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { staleGenerated } from "../../scripts/check.ts";
import { generateArtifacts } from "../../scripts/generate.ts";
import * as validators from "../../generated/validators.cjs";

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

  type Schema = Record<string, unknown> & { properties?: Record<string, Record<string, unknown>> };
  function openapi() {
    return JSON.parse(first.get("openapi.json")!) as {
      paths: Record<string, Record<string, { operationId: string; requestBody?: { content: Record<string, Schema> } }>>;
      components: { schemas: Record<string, Schema> };
    };
  }

  it("writes every event stream's schema as one event's, marked as a sequence, each JSON data field naming its schema", () => {
    const document = openapi();
    const streams: string[] = [];
    for (const item of Object.values(document.paths)) {
      for (const operation of Object.values(item)) {
        const responses = (operation as unknown as { responses: Record<string, { content?: Record<string, Schema> }> })
          .responses;
        for (const response of Object.values(responses)) {
          const media = response.content?.["text/event-stream"];
          if (!media) continue;
          streams.push(operation.operationId);
          // The schema is that of each event (OpenAPI 3.2's itemSchema), not of an array of them.
          assert.equal(media["x-runplane-sequence"], true, operation.operationId);
          const event = media.schema as { anyOf?: Array<{ $ref: string }>; $ref?: string; type?: unknown };
          assert.equal(event.type, undefined, operation.operationId);
          // A stream of one kind of event names it alone; of several, any of them.
          const events = event.anyOf ?? [{ $ref: event.$ref! }];
          for (const { $ref } of events) {
            const data = document.components.schemas[$ref.split("/").pop()!].properties!.data;
            assert.equal(data.type, "string", $ref);
          }
        }
      }
    }
    assert.deepEqual(streams.sort(), ["getAppLogs", "getDeploymentLogs", "getRunLogs", "runFunction", "watchRuns"]);
    const json = (name: string) => {
      const { description: _, ...data } = document.components.schemas[name].properties!.data;
      return data;
    };
    const payload = (name: string) => ({
      type: "string",
      contentMediaType: "application/json",
      contentSchema: { $ref: `#/components/schemas/${name}` },
    });
    assert.deepEqual(json("RunChangeEvent"), payload("RunChange"));
    assert.deepEqual(json("RunLogLineEvent"), payload("RunLogLine"));
    assert.deepEqual(json("RunLogEndEvent"), payload("RunLogEnd"));
    assert.deepEqual(json("AppLogLineEvent"), payload("AppLogLine"));
    assert.deepEqual(json("BuildLogEndEvent"), payload("Deployment"));
    assert.deepEqual(json("RunErrorEvent"), payload("Problem"));
    assert.deepEqual(json("BuildLogLineEvent"), { type: "string" }, "a build log line is text as it is");
    assert.deepEqual(json("RunItemEvent"), { type: "string" }, "a string item is sent as it is");
    const types = first.get("api.d.ts")!;
    assert.match(
      types,
      /"text\/event-stream": components\["schemas"\]\["RunChangeEvent"\] \| components\["schemas"\]\["RunResyncEvent"\];/,
    );
    // A stream's validator checks one event.
    const event = validators.watchRuns_200_text_event_stream;
    assert.equal(event({ event: "resync", data: "{}" }), true);
    assert.equal(event([{ event: "resync", data: "{}" }]), false, "an array of events is not an event");
  });

  it("declares a bundle (createDeployment's gzip body) as binary", () => {
    const body = openapi().paths["/v3/projects/{project_id}/apps/{app_id}/deployments"].post.requestBody!;
    assert.deepEqual(body.content["application/gzip"].schema, {
      type: "string",
      format: "binary",
      contentMediaType: "application/gzip",
    });
    assert.match(first.get("api.d.ts")!, /"application\/gzip": Uint8Array;/);
  });
});
