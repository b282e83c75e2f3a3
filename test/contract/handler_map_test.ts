import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { ROOT } from "../../scripts/generate.ts";

const run = promisify(execFile);
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");

/**
 * Copies server/handlers beside the original (so its relative imports still resolve), applies `edit`
 * to one file, and type-checks the copy with the project's compiler options.
 */
async function typecheckEditedHandlers(
  file: string,
  edit: (source: string) => string,
): Promise<{ ok: boolean; output: string }> {
  const probe = await mkdtemp(join(ROOT, "server", "_probe_"));
  try {
    await cp(join(ROOT, "server", "handlers"), probe, { recursive: true });
    const path = join(probe, file);
    const source = await readFile(path, "utf8");
    const edited = edit(source);
    assert.notEqual(edited, source, "the edit changed the file");
    await writeFile(path, edited);
    const tsconfig = join(probe, "tsconfig.json");
    await writeFile(
      tsconfig,
      JSON.stringify({ extends: join(ROOT, "tsconfig.json"), include: [join(probe, "mod.ts")] }),
    );
    const result = await run(process.execPath, [tsc, "-p", tsconfig, "--noEmit"], { cwd: ROOT })
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
