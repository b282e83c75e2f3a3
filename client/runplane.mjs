#!/usr/bin/env -S node --max-semi-space-size=16
// (The flag is the server's, for `runplane serve`: see server/node_flags.ts.)
// The `runplane` executable. An installed package (under node_modules) runs the JavaScript that
// `npm pack` built into dist/: tsx's loader costs ~200 ms of CPU per start, more than the CLI itself
// (measured on `runplane run`: ~300 ms through tsx, ~110 ms built). A checkout runs its TypeScript
// sources through tsx, so an edit takes effect at once and a dist/ left by an earlier build is never run.
import { existsSync } from "node:fs";

const built = new URL("../dist/server/cli/mod.js", import.meta.url);
let cli;
if (import.meta.url.includes("/node_modules/") && existsSync(built)) {
  cli = await import(built.href);
} else {
  const { register } = await import("tsx/esm/api");
  register();
  cli = await import("../server/cli/mod.ts");
}
process.exitCode = await cli.main(process.argv.slice(2));
