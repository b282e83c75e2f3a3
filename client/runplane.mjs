#!/usr/bin/env -S node --max-semi-space-size=16
// (The flag is the server's, for `runplane serve`: see server/node_flags.ts.)
// The `runplane` executable. tsx's loader costs ~200 ms of CPU per start and compiling the sources ~1 s
// more, above the CLI itself, so no command but `serve` runs through it:
// - an installed package (under node_modules) runs the JavaScript that `npm pack` built into dist/;
// - a checkout (or `npm link` of one) runs its compiled CLI, node_modules/.cache/runplane-cli/<sources>/
//   (scripts/build_cli.mjs),
//   built by `npm ci` and again by the first command after an edit, so an edit takes effect at once;
//   where esbuild is missing (an install without devDependencies) it runs the sources through tsx;
// - `runplane serve` in a checkout runs the sources through tsx, as `npm start` does (the server finds
//   its Python files and the dashboard beside its modules), and so does every command with
//   RUNPLANE_CLI_SOURCES=1 (a test that records which source modules a command loads).
import { existsSync } from "node:fs";

const args = process.argv.slice(2);
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
  const { buildCli, currentCliBuild } = await import("../scripts/build_cli.mjs");
  const root = new URL("..", import.meta.url).pathname;
  let entry = currentCliBuild(root);
  if (!entry) {
    try {
      entry = await buildCli(root, { quiet: true });
    } catch {
      return undefined;
    }
  }
  return await import(new URL(`file://${entry}`).href);
}
