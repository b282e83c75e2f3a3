/**
 * Builds `@runplane/client` (`packages/client/`, what its `npm pack` runs): the client's module graph from
 * `client/mod.ts` as JavaScript and declarations into `packages/client/dist/`, with the generated API types
 * its declarations import. The graph reaches no server module: the package's runtime dependencies are
 * `openapi-fetch` and `eventsource-parser` alone (test/client/client_package_test.ts checks both).
 */
import { execFileSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

const packageDir = join(ROOT, "packages", "client");
const dist = join(packageDir, "dist");
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", join(packageDir, "tsconfig.json")], { cwd: ROOT, stdio: "inherit" });
cpSync(join(ROOT, "generated", "api.d.ts"), join(dist, "generated", "api.d.ts"));
console.error(`Built @runplane/client into ${dist}`);
