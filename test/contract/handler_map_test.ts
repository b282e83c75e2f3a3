import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import ts from "typescript";
import { ROOT } from "../../scripts/generate.ts";
import { cachingCompilerHost, formatDiagnostics } from "../_helpers/typescript.ts";

const HANDLERS = join(ROOT, "server", "handlers");

/** The project's compiler options (tsconfig.json). */
function projectOptions(): ts.CompilerOptions {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) =>
      assert.fail(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")),
  });
  assert.ok(config, "tsconfig.json parses");
  return config.options;
}

// One host for the three probes: each unedited file is parsed once, so they cost one parse and three checks.
const options = projectOptions();
const host = cachingCompilerHost(options);

/**
 * Type-checks the handler map (`server/handlers/mod.ts` and what it imports) with the project's compiler
 * options after applying `edit` to one file of server/handlers, in memory: nothing is written to the
 * checkout. Reports the diagnostics of server/handlers, where a handler that breaks the contract shows.
 */
function typecheckEditedHandlers(file: string, edit: (source: string) => string): { ok: boolean; output: string } {
  const path = join(HANDLERS, file);
  const source = ts.sys.readFile(path);
  assert.ok(source !== undefined, `${path} exists`);
  const edited = edit(source);
  assert.notEqual(edited, source, "the edit changed the file");
  const program = ts.createProgram({
    rootNames: [join(HANDLERS, "mod.ts")],
    options,
    host: host.withOverrides(new Map([[path, edited]])),
  });
  const handlerFiles = readdirSync(HANDLERS).filter((name) => name.endsWith(".ts")).map((name) => join(HANDLERS, name));
  const diagnostics = [
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...handlerFiles.flatMap((name) => {
      const sourceFile = program.getSourceFile(name);
      assert.ok(sourceFile, `${name} is part of the handler map's program`);
      return [...program.getSyntacticDiagnostics(sourceFile), ...program.getSemanticDiagnostics(sourceFile)];
    }),
  ];
  return { ok: diagnostics.length === 0, output: formatDiagnostics(diagnostics, ROOT) };
}

describe("the handler map is checked against the contract", () => {
  it("type-checks as committed", () => {
    const result = typecheckEditedHandlers("system.ts", (s) => s.replace("JWKS, liveness", "JWKS and liveness"));
    assert.equal(result.ok, true, result.output);
  });

  it("fails to compile when a handler is deleted", () => {
    const result = typecheckEditedHandlers(
      "builds.ts",
      (s) => s.replace(/async createBaseImageHash\([\s\S]*?\n    },\n/, ""),
    );
    assert.equal(result.ok, false);
    assert.match(result.output, /createBaseImageHash/);
  });

  it("fails to compile when a handler's return type changes", () => {
    const result = typecheckEditedHandlers(
      "system.ts",
      (s) => s.replace('body: { status: "ok" }', 'body: { status: "fine" }'),
    );
    assert.equal(result.ok, false);
    assert.match(result.output, /"fine"/);
  });
});
