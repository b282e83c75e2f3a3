import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";
import {
  boundaryReport,
  findCycles,
  findSqlText,
  findViolations,
  type ImportEdge,
  readImports,
} from "../../scripts/check_boundaries.ts";

function edge(from: string, specifier: string, to: string | null): ImportEdge {
  return { from, specifier, to, line: 1 };
}

async function tree(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "runplane-boundaries-"));
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(root, dirname(path)), { recursive: true });
    await writeFile(join(root, path), text);
  }
  return root;
}

describe("the import-boundary check", () => {
  it("refuses Koa, server/http, server/handlers and server/config.ts in a domain folder", () => {
    const rules = findViolations([
      edge("server/runs/service.ts", "koa", null),
      edge("server/runs/service.ts", "../http/mod.ts", "server/http/mod.ts"),
      edge("server/webhooks/outbox.ts", "../handlers/runs.ts", "server/handlers/runs.ts"),
      edge("server/store/mod.ts", "../config.ts", "server/config.ts"),
      edge("server/http/mod.ts", "koa", null),
      edge("server/mod.ts", "./config.ts", "server/config.ts"),
    ]).map((v) => `${v.edge.from} ${v.rule}`);
    assert.deepEqual(rules, [
      "server/runs/service.ts domain-no-http",
      "server/runs/service.ts domain-no-http",
      "server/webhooks/outbox.ts domain-no-http",
      "server/store/mod.ts domain-no-http",
    ]);
  });

  it("refuses server/ in client/, runs and runtime importing each other, and another folder's private files", () => {
    const violations = findViolations([
      edge("client/_commands/serve.ts", "../../server/main.ts", "server/main.ts"),
      edge("client/cli.ts", "./_commands/run.ts", "client/_commands/run.ts"),
      edge("server/runtime/mod.ts", "../runs/run_id.ts", "server/runs/run_id.ts"),
      edge("server/mod.ts", "./runs/_queries.ts", "server/runs/_queries.ts"),
      edge("server/runs/service.ts", "./_queries.ts", "server/runs/_queries.ts"),
      edge("test/client/tree_test.ts", "../../client/_commands/tree.ts", "client/_commands/tree.ts"),
      edge("test/runs/queries_test.ts", "../../server/runs/_queries.ts", "server/runs/_queries.ts"),
      edge("test/webhooks/x_test.ts", "../../server/runs/_queries.ts", "server/runs/_queries.ts"),
    ]);
    assert.deepEqual(violations.map((v) => `${v.edge.from} ${v.rule}`), [
      "client/_commands/serve.ts client-no-server",
      "server/runtime/mod.ts separate-domains",
      "server/mod.ts private-file",
      "test/client/tree_test.ts private-file",
      "test/webhooks/x_test.ts private-file",
    ]);
    assert.match(violations[2].reason, /private to server\/runs\//);
  });

  it("lets nothing under server/ but main.ts and cli/ import the composition root, and only it import server/wiring/", () => {
    const violations = findViolations([
      edge("server/host/worker.ts", "../mod.ts", "server/mod.ts"),
      edge("server/host/_messages.ts", "../mod.ts", "server/mod.ts"),
      edge("server/placement/mod.ts", "../mod.ts", "server/mod.ts"),
      edge("server/handlers/system.ts", "../wiring/store.ts", "server/wiring/store.ts"),
      edge("server/main.ts", "./mod.ts", "server/mod.ts"),
      edge("server/cli/serve.ts", "../mod.ts", "server/mod.ts"),
      edge("server/mod.ts", "./wiring/store.ts", "server/wiring/store.ts"),
      edge("server/wiring/apps.ts", "./store.ts", "server/wiring/store.ts"),
      edge("test/_helpers/server.ts", "../../server/mod.ts", "server/mod.ts"),
    ]);
    assert.deepEqual(violations.map((v) => `${v.edge.from} ${v.rule}`), [
      "server/host/worker.ts composition-root",
      "server/host/_messages.ts composition-root",
      "server/placement/mod.ts composition-root",
      "server/handlers/system.ts composition-root",
    ]);
    assert.match(violations[0].reason, /only server\/main\.ts and server\/cli\/ import it/);
  });

  it("holds host/, sandbox/ and gpus/ to the domain rules: no Koa, no server/http, server/handlers or server/config.ts", () => {
    const rules = findViolations([
      edge("server/host/supervisor.ts", "../config.ts", "server/config.ts"),
      edge("server/host/call_server.ts", "koa", null),
      edge("server/sandbox/mod.ts", "../http/mod.ts", "server/http/mod.ts"),
      edge("server/gpus/_inventory.ts", "../handlers/system.ts", "server/handlers/system.ts"),
      edge("server/host/worker.ts", "../runs/mod.ts", "server/runs/mod.ts"),
    ]).map((v) => `${v.edge.from} ${v.rule}`);
    assert.deepEqual(rules, [
      "server/host/supervisor.ts domain-no-http",
      "server/host/call_server.ts domain-no-http",
      "server/sandbox/mod.ts domain-no-http",
      "server/sandbox/mod.ts leaf-folder",
      "server/gpus/_inventory.ts domain-no-http",
      "server/gpus/_inventory.ts leaf-folder",
    ]);
  });

  it("keeps sandbox/ and gpus/ leaves: nothing of server/ outside themselves but server/log.ts", () => {
    const violations = findViolations([
      edge("server/sandbox/_jail.ts", "../runtime/mod.ts", "server/runtime/mod.ts"),
      edge("server/gpus/mod.ts", "../problems/mod.ts", "server/problems/mod.ts"),
      edge("server/sandbox/mod.ts", "../gpus/mod.ts", "server/gpus/mod.ts"),
      edge("server/sandbox/mod.ts", "../log.ts", "server/log.ts"),
      edge("server/sandbox/_jail.ts", "./_policy.ts", "server/sandbox/_policy.ts"),
      edge("server/gpus/_inventory.ts", "node:fs", null),
      edge("server/runtime/mod.ts", "../sandbox/mod.ts", "server/sandbox/mod.ts"),
    ]);
    assert.deepEqual(violations.map((v) => `${v.edge.from} ${v.rule}`), [
      "server/sandbox/_jail.ts leaf-folder",
      "server/gpus/mod.ts leaf-folder",
      "server/sandbox/mod.ts leaf-folder",
    ]);
    assert.match(violations[0].reason, /server\/sandbox\/ is a leaf/);
  });

  it("lets the placement layer import domain folders, and no domain folder import the placement layer or the wiring", () => {
    const violations = findViolations([
      edge("server/host/worker.ts", "../placement/mod.ts", "server/placement/mod.ts"),
      edge("server/runtime/mod.ts", "../placement/host_parts.ts", "server/placement/host_parts.ts"),
      edge("server/cluster/registry.ts", "../wiring/apps.ts", "server/wiring/apps.ts"),
      edge("server/placement/mod.ts", "../host/mod.ts", "server/host/mod.ts"),
      edge("server/placement/mod.ts", "../runtime/mod.ts", "server/runtime/mod.ts"),
      edge("server/handlers/system.ts", "../placement/mod.ts", "server/placement/mod.ts"),
    ]);
    assert.deepEqual(violations.map((v) => `${v.edge.from} ${v.rule}`), [
      "server/host/worker.ts placement-above-domains",
      "server/runtime/mod.ts placement-above-domains",
      "server/cluster/registry.ts composition-root",
      "server/cluster/registry.ts placement-above-domains",
    ]);
  });

  it("reports the new rules on a broken tree of real files", async () => {
    const root = await tree({
      "server/mod.ts": `export function createServer() {}\n`,
      "server/main.ts": `import { createServer } from "./mod.ts";\nexport { createServer };\n`,
      "server/host/worker.ts": `import type { createServer } from "../mod.ts";\nexport type W = typeof createServer;\n`,
      "server/sandbox/mod.ts": `\nimport type { W } from "../host/worker.ts";\nexport type S = W;\n`,
      "server/placement/mod.ts": `export const place = 1;\n`,
      "server/gpus/mod.ts": `import { place } from "../placement/mod.ts";\nexport const g = place;\n`,
    });
    try {
      // Each line up to its rule: `<file>:<line>: imports "<specifier>" [<rule>]`.
      const report = boundaryReport(root).map((line) => line.slice(0, line.indexOf("]") + 1));
      assert.deepEqual(report.sort(), [
        `server/gpus/mod.ts:1: imports "../placement/mod.ts" [leaf-folder]`,
        `server/gpus/mod.ts:1: imports "../placement/mod.ts" [placement-above-domains]`,
        `server/host/worker.ts:1: imports "../mod.ts" [composition-root]`,
        `server/sandbox/mod.ts:2: imports "../host/worker.ts" [leaf-folder]`,
      ]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("finds import cycles, type-only ones included, and nothing in an acyclic graph", () => {
    assert.deepEqual(
      findCycles([
        edge("a.ts", "./b.ts", "b.ts"),
        edge("b.ts", "./c.ts", "c.ts"),
        edge("c.ts", "./a.ts", "a.ts"),
        edge("d.ts", "./a.ts", "a.ts"),
      ]),
      [["a.ts", "b.ts", "c.ts"]],
    );
    assert.deepEqual(findCycles([edge("a.ts", "./b.ts", "b.ts"), edge("d.ts", "./b.ts", "b.ts")]), []);
  });

  it("reads type-only, re-exported and dynamic imports from real files and reports them with their line", async () => {
    const root = await tree({
      "server/runs/service.ts": `import type { X } from "./_live.ts";\nexport const y = 1;\n`,
      "server/runs/_live.ts": `import type { y } from "./service.ts";\nexport type X = typeof y;\n`,
      "client/cli.ts": `\n\nconst m = await import("../server/main.ts");\nexport { m };\n`,
      "server/main.ts": `export * from "./runs/service.ts";\n`,
    });
    try {
      const edges = readImports(root, ["server", "client"]);
      assert.ok(edges.some((e) => e.from === "server/main.ts" && e.to === "server/runs/service.ts"));
      const report = boundaryReport(root);
      assert.ok(
        report.includes(
          `client/cli.ts:3: imports "../server/main.ts" [client-no-server]: ${
            findViolations([edge("client/cli.ts", "", "server/main.ts")])[0].reason
          }`,
        ),
        report.join("\n"),
      );
      assert.ok(
        report.some((line) =>
          line.startsWith("import cycle [no-cycles]: server/runs/_live.ts -> server/runs/service.ts")
        ),
      );
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("keeps SQL text out of domain folders: no maker of it imported, no statement written, except under server/store/", async () => {
    const root = await tree({
      "server/webhooks/a.ts": `import { rawStatement } from "../store/mod.ts";\nexport const q = rawStatement("x");\n`,
      "server/runs/b.ts": `import { sql } from "kysely";\nexport const t = "select * from runs where id = ?";\n`,
      "server/auth/c.ts":
        `export const message = "select a token from the list";\nexport const u = \`update "runs" set "status" = ?\`;\n`,
      "server/store/statements/d.ts":
        `import { rawStatement } from "../mod.ts";\nexport const q = rawStatement("delete from runs");\n`,
    });
    try {
      assert.deepEqual(findSqlText(root).map((line) => line.split(" [")[0]), [
        "server/auth/c.ts:2: a SQL statement",
        "server/runs/b.ts:1: imports sql",
        "server/runs/b.ts:2: a SQL statement",
        "server/webhooks/a.ts:1: imports rawStatement",
      ]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
