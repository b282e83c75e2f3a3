/**
 * Builds `@runplane/client` (`packages/client/`, what its `npm pack` runs): the client's module graph from
 * `client/mod.ts` as JavaScript and declarations into `packages/client/dist/`, with the generated API types
 * its declarations import. The graph reaches no server module: the package's runtime dependencies are
 * `openapi-fetch` and `eventsource-parser` alone (test/client/package_test.ts checks both).
 *
 * CommonJS too (`require("@runplane/client")`, and TypeScript projects that compile to CommonJS, which
 * would otherwise fail with TS1479): `dist/cjs/` holds the same client bundled by esbuild as one CommonJS
 * file, with a copy of the declarations that its `package.json` (`"type": "commonjs"`) makes CommonJS
 * declarations. eventsource-parser is required from there; openapi-fetch is bundled in (below).
 */
import { execFileSync } from "node:child_process";
import { cpSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildSync } from "esbuild";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

const packageDir = join(ROOT, "packages", "client");
const dist = join(packageDir, "dist");
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", join(packageDir, "tsconfig.json")], { cwd: ROOT, stdio: "inherit" });
cpSync(join(ROOT, "generated", "api.d.ts"), join(dist, "generated", "api.d.ts"));

const cjs = join(dist, "cjs");
buildSync({
  entryPoints: [join(ROOT, "client", "mod.ts")],
  bundle: true,
  format: "cjs",
  platform: "node",
  target: "node20",
  // openapi-fetch's CommonJS build exports its client as `default` without marking itself an ES module, so
  // a bundle requiring it would get the module object for the default import: its ES module is bundled in.
  external: ["eventsource-parser", "eventsource-parser/*"],
  outfile: join(cjs, "client", "mod.js"),
  logLevel: "error",
});
writeFileSync(join(cjs, "package.json"), '{ "type": "commonjs" }\n');
for (const folder of ["client", "generated"]) {
  cpSync(join(dist, folder), join(cjs, folder), {
    recursive: true,
    filter: (source) => !source.endsWith(".js") || source.endsWith(".d.ts"),
  });
}
console.error(`Built @runplane/client into ${dist} (ES modules) and ${cjs} (CommonJS)`);
