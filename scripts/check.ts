/**
 * `npm run check`: fails when generated/ differs from what spec/ produces, when `tsc --noEmit` fails (on the
 * TypeScript, and on the dashboard's `// @ts-check` JavaScript with `tsconfig.dashboard.json`),
 * when a file is not formatted as `npm run fmt` would, when an import breaks a layering rule
 * (`scripts/check_boundaries.ts`), when a function of the product code is longer than 120 lines without being
 * listed in `scripts/long_functions.json`, or is listed and no longer needs to be
 * (`scripts/check_function_length.ts`), or when a linter reports anything on the OpenAPI document: Redocly
 * (`redocly.yaml`: its `recommended` rules) or Spectral (`.spectral.yaml`: `spectral:oas`), warnings
 * included.
 */
import { spawnSync } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { generateArtifacts, ROOT } from "./generate.ts";
import { redoclyProblems, spectralProblems } from "./openapi_lint.ts";

/** Where the type checks keep their incremental build info. */
const TSC_CACHE = join(ROOT, "node_modules", ".cache", "runplane-tsc");

/**
 * Lists the generated files that differ from the spec's output (missing, stale or extra). `artifacts` is
 * that output when the caller has already generated it.
 */
export async function staleGenerated(
  options: { generatedDir?: string; artifacts?: Map<string, string> } = {},
): Promise<string[]> {
  const generatedDir = options.generatedDir ?? join(ROOT, "generated");
  const artifacts = options.artifacts ?? await generateArtifacts();
  const stale: string[] = [];
  for (const [name, contents] of artifacts) {
    const current = await readFile(join(generatedDir, name), "utf8").catch(() => null);
    if (current !== contents) stale.push(name);
  }
  for (const name of await readdir(generatedDir).catch(() => [] as string[])) {
    if (!artifacts.has(name)) stale.push(name);
  }
  return stale;
}

function runStep(name: string, command: string, args: string[]): boolean {
  process.stdout.write(`check: ${name}\n`);
  const result = spawnSync(command, args, { cwd: ROOT, stdio: "inherit" });
  if (result.status !== 0) process.stdout.write(`check: ${name} failed\n`);
  return result.status === 0;
}

/** A step that passes when `problems` lists none; it prints each. */
function lintStep(name: string, problems: () => string[]): boolean {
  process.stdout.write(`check: ${name}\n`);
  const found = problems();
  for (const line of found) process.stdout.write(`  ${line}\n`);
  if (found.length) process.stdout.write(`check: ${name} failed: ${found.length} problems\n`);
  return found.length === 0;
}

if (process.argv[1]?.endsWith("check.ts")) {
  const require = createRequire(import.meta.url);
  let ok = true;
  process.stdout.write("check: generated/ matches spec/\n");
  const stale = await staleGenerated();
  if (stale.length) {
    ok = false;
    process.stdout.write(
      `check: generated/ is out of date (${stale.join(", ")}): run npm run generate and commit the result\n`,
    );
  }
  const tsc = require.resolve("typescript/bin/tsc");
  // Incremental: a second check on the same checkout re-reads only what changed (~30 s → a few on 2 cores).
  // The build info lives in node_modules/.cache, so a fresh clone checks everything.
  const buildInfo = (name: string) => ["--incremental", "--tsBuildInfoFile", join(TSC_CACHE, `${name}.tsbuildinfo`)];
  ok = runStep("tsc --noEmit", process.execPath, [tsc, "-p", ".", "--noEmit", ...buildInfo("server")]) && ok;
  ok = runStep("tsc --noEmit (the dashboard's JavaScript, checked with its JSDoc types)", process.execPath, [
    tsc,
    "-p",
    "tsconfig.dashboard.json",
    "--noEmit",
    ...buildInfo("dashboard"),
  ]) && ok;
  const tsx = join(ROOT, "node_modules", "tsx", "dist", "cli.mjs");
  ok = runStep("formatting (npm run fmt fixes it)", process.execPath, [tsx, "scripts/fmt.ts", "--check"]) && ok;
  ok = runStep("import boundaries", process.execPath, [tsx, "scripts/check_boundaries.ts"]) && ok;
  ok = runStep("function length (at most 120 lines, or listed in scripts/long_functions.json)", process.execPath, [
    tsx,
    "scripts/check_function_length.ts",
  ]) && ok;
  const document = "generated/openapi.json";
  ok = lintStep("redocly lint (recommended, warnings fail)", () => redoclyProblems(document)) && ok;
  ok = lintStep("spectral lint (spectral:oas, warnings fail)", () => spectralProblems(document)) && ok;
  process.stdout.write(ok ? "check: all passed\n" : "check: failed\n");
  process.exit(ok ? 0 : 1);
}
