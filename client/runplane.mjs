#!/usr/bin/env -S node --max-semi-space-size=16
// (The flag is the server's, for `runplane serve`: see server/node_flags.ts.)
// The `runplane` executable. tsx's loader costs ~200 ms of CPU per start and compiling the sources ~1 s
// more, above the CLI itself, so no command but `serve` runs through it:
// - an installed package (under node_modules) runs the JavaScript that `npm pack` built into dist/;
// - a checkout (or `npm link` of one) runs its compiled CLI, node_modules/.cache/runplane-cli/<sources>/
//   (scripts/build_cli.mjs), built by `npm ci` and again by the first command after an edit (currentBuild
//   below), so an edit takes effect at once;
//   where esbuild is missing (an install without devDependencies) it runs the sources through tsx;
// - `runplane serve` in a checkout runs the sources through tsx, as `npm start` does (the server finds
//   its Python files and the dashboard beside its modules), and so does every command with
//   RUNPLANE_CLI_SOURCES=1 (a test that records which source modules a command loads).
import { existsSync, readFileSync, statSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { setFlagsFromString } from "node:v8";

const args = process.argv.slice(2);
// A command's one or two REST calls go through fetch, whose HTTP parser is WebAssembly: V8 compiles it
// quickly (Liftoff), then again optimized on a background thread that the process waits for at exit
// (~150 ms of a 400 ms `runplane apps list`, measured with strace on the 2-core machine). A command ends
// long before optimized code would pay off; `serve` is a long-lived server and keeps the default.
if (args[0] !== "serve") setFlagsFromString("--liftoff-only");
const installed = new URL("../dist/server/cli/mod.js", import.meta.url);
let cli;
if (import.meta.url.includes("/node_modules/") && existsSync(installed)) {
  cli = await import(installed.href);
} else {
  const sources = args[0] === "serve" || process.env.RUNPLANE_CLI_SOURCES === "1";
  cli = sources ? undefined : await compiledCli();
  if (!cli) {
    const { register } = await import("tsx/esm/api");
    register();
    cli = await import("../server/cli/mod.ts");
  }
}
process.exitCode = await cli.main(args);

/** The checkout's compiled CLI, built now if the sources changed since; undefined where it cannot be built. */
async function compiledCli() {
  const root = fileURLToPath(new URL("..", import.meta.url)); // decoded: a checkout's path may hold spaces
  let entry = currentBuild(root);
  if (!entry) {
    try {
      const { buildCli } = await import("../scripts/build_cli.mjs");
      entry = await buildCli(root, { quiet: true });
    } catch {
      return undefined;
    }
  }
  return await import(pathToFileURL(entry).href);
}

/**
 * The entry of the compiled CLI that the checkout at `root` (ending in /) now calls for, or undefined when
 * a source it was built from changed or is gone: the builds' current.json names the build and the change
 * time each of its sources had (scripts/build_cli.mjs). Kept here, not imported, as the check runs on
 * every command.
 */
function currentBuild(root) {
  const folder = `${root}node_modules/.cache/runplane-cli/`;
  let manifest;
  try {
    manifest = JSON.parse(readFileSync(`${folder}current.json`, "utf8"));
    for (const [path, mtime] of Object.entries(manifest.inputs)) {
      if (statSync(`${root}${path}`).mtimeMs !== mtime) return undefined;
    }
  } catch {
    return undefined; // no build yet, or a source removed
  }
  const entry = `${folder}${manifest.build}/mod.js`;
  return existsSync(entry) ? entry : undefined;
}
