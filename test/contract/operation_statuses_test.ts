/**
 * Every operation declares every status the server can answer it with: the statuses of the HTTP layer
 * (the parser's refusals, auth, body limits and media types, validation, the drain gate and the store's
 * outages, failures) are worked out per route from the route table, and each must be declared; then each
 * is provoked on a running server, whose response check answers 500 for a status the contract lacks.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { routes, type RouteSpec } from "../../generated/routes.ts";
import { ROOT } from "../../scripts/generate.ts";
import { CLIENT_ERROR_STATUSES, createDrainGate, MAX_HEADER_BYTES } from "../../server/http/mod.ts";
import { checkedFetch } from "../_helpers/contract.ts";
import { startTestServer, TEST_PROJECT, type TestServer } from "../_helpers/server.ts";

/** Operations that read nothing from the store: the only ones a store outage never turns into a 503. */
const STORELESS = new Set(["getHealth"]);

/** The statuses the HTTP layer itself can answer `route` with, each with why. */
function layerStatuses(route: RouteSpec): Map<number, string> {
  const statuses = new Map<number, string>();
  for (const status of CLIENT_ERROR_STATUSES) statuses.set(status, "refused by the HTTP parser before routing");
  statuses.set(500, "an unhandled error, or a response the contract check refuses");
  const draining = createDrainGate();
  draining.close();
  if (draining.refuses(route.path)) statuses.set(503, "the server is draining");
  if (!STORELESS.has(route.operationId)) statuses.set(503, "the store is unavailable");
  if (route.auth === "bearer") {
    statuses.set(401, "no valid token");
    statuses.set(403, "a token of another project, or without the scope");
  }
  if (route.params.some((p) => p.in === "path" || p.in === "query")) statuses.set(400, "a parameter fails validation");
  if (route.body) {
    statuses.set(400, "malformed or invalid body");
    statuses.set(413, "body over the limit");
    statuses.set(415, "body of a media type the operation does not take");
  }
  return statuses;
}

function declared(route: RouteSpec): Set<number> {
  return new Set(Object.keys(route.validators.responses).map(Number));
}

/** A value for each path parameter the routes have: it need only route (the layer answers first). */
const PATH_VALUES: Record<string, string> = {
  project_id: TEST_PROJECT,
  app_id: "hello",
  app_name: "hello",
  function_name: "run",
  run_id: `run_${"0".repeat(26)}`,
  deployment_id: `dep_${"0".repeat(26)}`,
  service_account_id: "sa_AAAAAAAAAAAAAAAA",
  name: "some_name",
  path: "models/a.bin",
  owner: "octo",
  repo: "repo",
};

function urlOf(base: string, route: RouteSpec): string {
  return base + route.path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    assert.ok(PATH_VALUES[name], `a value for path parameter ${name}`);
    return PATH_VALUES[name];
  });
}

describe("every operation declares the statuses the HTTP layer answers", () => {
  it("walks every operation of the contract", () => {
    const document = JSON.parse(readFileSync(join(ROOT, "generated", "openapi.json"), "utf8")) as {
      paths: Record<string, Record<string, { operationId: string }>>;
    };
    const operations = Object.values(document.paths).flatMap((item) => Object.values(item).map((o) => o.operationId));
    assert.deepEqual(routes.map((r) => r.operationId).sort(), operations.sort());
  });

  for (const route of routes) {
    it(`${route.operationId} declares them`, () => {
      const missing = [...layerStatuses(route)].filter(([status]) => !declared(route).has(status));
      assert.deepEqual(missing.map(([status, why]) => `${status} (${why})`), []);
    });
  }
});

describe("each status the HTTP layer answers is one the operation declares, on a running server", () => {
  let t: TestServer;
  let allScopes: string;
  let otherProject: string;

  before(async () => {
    t = await startTestServer({ env: { RUNPLANE_BODY_LIMIT: "1kb" } });
    allScopes = (await t.mintToken({ scopes: ["admin", "deploy", "rest", "run"] })).token;
    otherProject = (await t.mintToken({ projectId: "p-other", scopes: ["admin", "deploy", "rest", "run"] })).token;
  });
  after(() => t?.close());

  function send(route: RouteSpec, init: { headers?: Record<string, string>; body?: string } = {}) {
    return checkedFetch(urlOf(t.url, route), { method: route.method, headers: init.headers, body: init.body });
  }

  it("431: headers past the parser's limit, on every operation", async () => {
    for (const route of routes) {
      const response = await send(route, { headers: { "X-Padding": "x".repeat(MAX_HEADER_BYTES + 1024) } });
      assert.equal(response.status, 431, route.operationId);
    }
  });

  it("401 without a token and 403 with another project's, on every operation that needs one", async () => {
    for (const route of routes.filter((r) => r.auth === "bearer")) {
      assert.equal((await send(route)).status, 401, route.operationId);
      const foreign = await send(route, { headers: { Authorization: `Bearer ${otherProject}` } });
      assert.equal(foreign.status, 403, route.operationId);
    }
  });

  it("415 for a media type it does not take and 413 over the limit, on every operation with a body", async () => {
    // fetch sends no body with GET: a custom runtime's GET takes one, but is left out here.
    const withBody = routes.filter((r) => r.body && r.method !== "GET");
    assert.ok(withBody.some((r) => r.operationId === "createServiceAccount"));
    for (const route of withBody) {
      const auth: Record<string, string> = route.auth === "bearer" ? { Authorization: `Bearer ${allScopes}` } : {};
      // An operation that takes any media type (a custom runtime's route) has no 415 to answer.
      if (!(route.body!.contentTypes as readonly string[]).includes("*/*")) {
        const text = await send(route, { headers: { ...auth, "Content-Type": "text/plain" }, body: "hello" });
        assert.equal(text.status, 415, route.operationId);
      }
      // A streamed body (a volume's file: application/octet-stream only) has no body limit of its own: its
      // 413 is the volume's room, provoked in test/volumes/.
      if (!(route.body!.contentTypes as readonly string[]).includes("application/json")) continue;
      const large = JSON.stringify({ padding: "x".repeat(4096) });
      const big = await send(route, { headers: { ...auth, "Content-Type": "application/json" }, body: large });
      assert.equal(big.status, 413, route.operationId);
    }
  });
});
