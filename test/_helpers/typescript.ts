/**
 * The TypeScript compiler in the test's own process, for tests that type-check code: starting `tsc` costs
 * a Node process and a parse of the standard library for every check.
 */
import ts from "typescript";

/** A compiler host that parses each file once; `withOverrides` gives a view with in-memory files. */
export type CachingCompilerHost = ts.CompilerHost & { withOverrides(overrides: Map<string, string>): ts.CompilerHost };

/**
 * A compiler host for `options` that parses each file once for all the programs made with it (the
 * standard library and typings included), except the files `overrides` gives in-memory text for.
 */
export function cachingCompilerHost(options: ts.CompilerOptions): CachingCompilerHost {
  const host = ts.createCompilerHost(options);
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
  return Object.assign(host, {
    withOverrides: (overrides: Map<string, string>): ts.CompilerHost => ({
      ...host,
      getSourceFile: (fileName, languageVersion, onError, shouldCreate) => {
        const text = overrides.get(fileName);
        return text === undefined
          ? host.getSourceFile(fileName, languageVersion, onError, shouldCreate)
          : ts.createSourceFile(fileName, text, languageVersion, true);
      },
    }),
  });
}

/** `diagnostics` as tsc prints them, paths relative to `directory`. */
export function formatDiagnostics(diagnostics: readonly ts.Diagnostic[], directory: string): string {
  return ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (name) => name,
    getCurrentDirectory: () => directory,
    getNewLine: () => "\n",
  });
}
