import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { ROOT } from "../../scripts/generate.ts";

const run = promisify(execFile);
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

/**
 * Copies the server's sources (with what they import: generated/, the package and compiler settings) into a
 * temporary folder outside the checkout, applies `edit` to one file of server/handlers, and type-checks the
 * copy's handler map with the project's compiler options.
 */
async function typecheckEditedHandlers(
  file: string,
  edit: (source: string) => string,
): Promise<{ ok: boolean; output: string }> {
  const probe = await mkdtemp(join(tmpdir(), "runplane-handler-map-"));
  try {
    for (const part of ["server", "generated", "package.json", "tsconfig.json"]) {
      await cp(join(ROOT, part), join(probe, part), { recursive: true });
    }
    await symlink(join(ROOT, "node_modules"), join(probe, "node_modules"), "dir");
    const path = join(probe, "server", "handlers", file);
    const source = await readFile(path, "utf8");
    const edited = edit(source);
    assert.notEqual(edited, source, "the edit changed the file");
    await writeFile(path, edited);
    const tsconfig = join(probe, "tsconfig.probe.json");
    await writeFile(tsconfig, JSON.stringify({ extends: "./tsconfig.json", include: ["server/handlers/mod.ts"] }));
    const result = await run(process.execPath, [tsc, "-p", tsconfig, "--noEmit"], { cwd: probe })
      .then((r) => ({ ok: true, output: r.stdout }), (e: { stdout: string }) => ({ ok: false, output: e.stdout }));
    return result;
  } finally {
    await rm(probe, { recursive: true, force: true });
  }
}

describe("the handler map is checked against the contract", () => {
  it("type-checks as committed", async () => {
    const result = await typecheckEditedHandlers("system.ts", (s) => s.replace("JWKS, liveness", "JWKS and liveness"));
    assert.equal(result.ok, true, result.output);
  });

  it("fails to compile when a handler is deleted", async () => {
    const result = await typecheckEditedHandlers(
      "builds.ts",
      (s) => s.replace(/async createBaseImageHash\([\s\S]*?\n    },\n/, ""),
    );
    assert.equal(result.ok, false);
    assert.match(result.output, /createBaseImageHash/);
  });

  it("fails to compile when a handler's return type changes", async () => {
    const result = await typecheckEditedHandlers(
      "system.ts",
      (s) => s.replace('body: { status: "ok" }', 'body: { status: "fine" }'),
    );
    assert.equal(result.ok, false);
    assert.match(result.output, /"fine"/);
  });
});
