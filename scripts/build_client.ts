/**
 * `npm run build`: emits the client (`client/mod.ts` and what it imports) as JavaScript and
 * declarations into `dist/`, and copies the generated API types the declarations import, so other
 * services use `runplane/client` from plain Node without tsx.
 */
import { execFileSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

const dist = join(ROOT, "dist");
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", join(ROOT, "tsconfig.build.json")], { cwd: ROOT, stdio: "inherit" });
cpSync(join(ROOT, "generated", "api.d.ts"), join(dist, "generated", "api.d.ts"));
console.error(`Built the client into ${dist}`);
