/**
 * The operation router over the contract's route table: fixed segments before parameters, matching as
 * @koa/router's did (case-insensitive fixed segments, a trailing slash ignored), parameters decoded and of
 * any length, a GET answering HEAD, and the methods a 405 names.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { routes } from "../../generated/routes.ts";
import { createOperationRouter } from "../../server/http/routing.ts";

const router = createOperationRouter(routes, (route) => route.operationId);

/** The operations of a custom runtime's routes, by method. */
const APP_ROUTES = {
  GET: "callAppGet",
  HEAD: "callAppHead",
  PUT: "callAppPut",
  PATCH: "callAppPatch",
  DELETE: "callAppDelete",
  OPTIONS: "callAppOptions",
};

function found(method: string, path: string) {
  const match = router.find(method, path);
  return match && { operation: match.handle, params: { ...match.params } };
}

describe("the operation router", () => {
  it("prefers a fixed segment, and falls back to the parameters when the fixed path leads nowhere", () => {
    assert.deepEqual(found("GET", "/v4/projects/p-1/runs"), {
      operation: "listProjectRuns",
      params: { project_id: "p-1" },
    });
    // The run API's own path: a project may be called `projects`.
    assert.deepEqual(found("POST", "/v4/projects/p-1/runs"), {
      operation: "runFunction",
      params: { project_id: "projects", app_name: "p-1", function_name: "runs" },
    });
    assert.deepEqual(found("POST", "/v4/projects/apps/predict"), {
      operation: "runFunction",
      params: { project_id: "projects", app_name: "apps", function_name: "predict" },
    });
    assert.equal(found("GET", "/v4/projects/p-1/runs/events")?.operation, "watchRuns");
    assert.equal(found("POST", "/v4/projects/p/apps/a/runs/r/webhook/redeliver")?.operation, "redeliverWebhook");
  });

  it("matches fixed segments in any case and ignores a trailing slash; parameters keep their case", () => {
    assert.deepEqual(found("GET", "/V3/Projects/P-Mixed/Apps/"), {
      operation: "listApps",
      params: { project_id: "P-Mixed" },
    });
    assert.equal(found("GET", "/healthz/")?.operation, "getHealth");
  });

  it("decodes parameters and takes long ones (the validators bound them)", () => {
    assert.equal(
      found("GET", "/v4/projects/p/integrations/github/repos/..%2Fx/widgets/tree")?.params.owner,
      "../x",
    );
    const long = "f".repeat(1_000);
    assert.equal(found("POST", `/v4/p/a/${long}`)?.params.function_name, long);
    assert.equal(found("POST", "/v4/p/a/f?async=true")?.params.function_name, "f");
  });

  it("answers HEAD with the GET operation, finds nothing for an unknown method or path", () => {
    assert.equal(found("HEAD", "/readyz")?.operation, "getReadiness");
    assert.equal(found("PATCH", "/readyz"), null);
    assert.equal(found("GET", "/v9/nothing"), null);
    assert.equal(found("GET", "/v4/p/a"), null);
  });

  it("finds a custom runtime's route by any other method, with the rest of the path as it was sent", () => {
    for (const [method, operation] of Object.entries(APP_ROUTES)) {
      assert.deepEqual(found(method, "/v4/p/a/items/a%2Fb/c?x=1"), {
        operation,
        params: { project_id: "p", app_name: "a", function_name: "items/a%2Fb/c" },
      });
    }
    // The app's root is no route (the path has one segment at least).
    assert.equal(found("GET", "/v4/p/a/"), null);
    // A fixed path still wins, and a function's POST stays one segment.
    assert.equal(found("GET", "/v4/projects/p-1/runs")?.operation, "listProjectRuns");
    assert.equal(found("POST", "/v4/p/a/b/c"), null);
  });

  it("lists the methods a path has operations for, without HEAD", () => {
    assert.deepEqual(router.allowedMethods("/v4/p/a/f").sort(), ["DELETE", "GET", "OPTIONS", "PATCH", "POST", "PUT"]);
    assert.deepEqual(router.allowedMethods("/v4/p/a/b/c").sort(), ["DELETE", "GET", "OPTIONS", "PATCH", "PUT"]);
    // A run's path is also a custom runtime's route of a project called `projects`.
    assert.deepEqual(router.allowedMethods("/v4/projects/p/apps/a/runs/r").sort(), [
      "DELETE",
      "GET",
      "OPTIONS",
      "PATCH",
      "PUT",
    ]);
    assert.deepEqual(router.allowedMethods("/v9/nothing"), []);
  });
});
