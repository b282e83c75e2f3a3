import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import ts from "typescript";
import { ROOT } from "../../scripts/generate.ts";

const HANDLERS = join(ROOT, "server", "handlers");

/**
 * The project's compiler options, and a compiler host that parses each unedited file once for every probe
 * (lib and node typings included): the three probes then cost one parse and three checks of the handlers.
 */
function probeCompiler(): { options: ts.CompilerOptions; host: ts.CompilerHost; parsed: Map<string, ts.SourceFile> } {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) =>
      assert.fail(ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")),
  });
  assert.ok(config, "tsconfig.json parses");
  const host = ts.createCompilerHost(config.options);
  const parsed = new Map<string, ts.SourceFile>();
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, languageVersion, onError, shouldCreate) => {
    let sourceFile = parsed.get(fileName);
    if (sourceFile === undefined) {
      sourceFile = getSourceFile(fileName, languageVersion, onError, shouldCreate);
      if (sourceFile !== undefined) parsed.set(fileName, sourceFile);
    }
    return sourceFile;
  };
  return { options: config.options, host, parsed };
}

const compiler = probeCompiler();

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
  const host: ts.CompilerHost = {
    ...compiler.host,
    getSourceFile: (fileName, languageVersion, onError, shouldCreate) =>
      fileName === path
        ? ts.createSourceFile(fileName, edited, languageVersion, true)
        : compiler.host.getSourceFile(fileName, languageVersion, onError, shouldCreate),
  };
  const program = ts.createProgram({ rootNames: [join(HANDLERS, "mod.ts")], options: compiler.options, host });
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
  const output = ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (name) => name,
    getCurrentDirectory: () => ROOT,
    getNewLine: () => "\n",
  });
  return { ok: diagnostics.length === 0, output };
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
