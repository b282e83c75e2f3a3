/**
 * `npm run fmt`: formats the project's TypeScript, JavaScript and JSON with dprint's Wasm plugins, configured by
 * `dprint.json`. `npm run fmt -- --check` (used by `npm run check`) changes nothing and fails listing every file
 * that is not formatted.
 *
 * The Wasm plugins run through `@dprint/formatter` rather than the `dprint` CLI package, whose per-platform
 * binaries are optional dependencies a lock file written on one platform does not always list.
 */
import { createContext } from "@dprint/formatter";
import * as json from "@dprint/json";
import * as typescript from "@dprint/typescript";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const ROOT = join(import.meta.dirname, "..");
const FORMATTED = /\.(ts|mts|cts|js|mjs|json)$/;

interface FmtConfig {
  lineWidth: number;
  indentWidth: number;
  typescript: Record<string, unknown>;
  json: Record<string, unknown>;
  excludes: string[];
}

/** Paths (relative to the root) of the files `fmt` covers: tracked or new, not ignored, not excluded. */
export function formattedFiles(config: FmtConfig): string[] {
  const listed = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "-z"], {
    cwd: ROOT,
    encoding: "utf8",
  });
  return listed.split("\0").filter((path) =>
    FORMATTED.test(path) && !config.excludes.some((excluded) => path === excluded || path.startsWith(`${excluded}/`))
  );
}

/** Formats `files` in place, or with `check` only reports them; returns the files that were not formatted. */
export function formatFiles(files: string[], options: { config: FmtConfig; check: boolean }): string[] {
  const { config } = options;
  const context = createContext({ lineWidth: config.lineWidth, indentWidth: config.indentWidth });
  context.addPlugin(readFileSync(typescript.getPath()), config.typescript);
  context.addPlugin(readFileSync(json.getPath()), config.json);
  const unformatted: string[] = [];
  for (const file of files) {
    const path = join(ROOT, file);
    let fileText: string;
    try {
      fileText = readFileSync(path, "utf8");
    } catch {
      continue; // listed by git but deleted in the work tree
    }
    const formatted = context.formatText({ filePath: path, fileText });
    if (formatted === fileText) continue;
    unformatted.push(file);
    if (!options.check) writeFileSync(path, formatted);
  }
  return unformatted;
}

if (process.argv[1]?.endsWith("fmt.ts")) {
  const config = JSON.parse(readFileSync(join(ROOT, "dprint.json"), "utf8")) as FmtConfig;
  const check = process.argv.includes("--check");
  const unformatted = formatFiles(formattedFiles(config), { config, check });
  for (const file of unformatted) process.stdout.write(`${check ? "not formatted" : "formatted"}: ${file}\n`);
  if (check && unformatted.length) {
    process.stdout.write("fmt: run npm run fmt to format these files\n");
    process.exitCode = 1;
  }
}
