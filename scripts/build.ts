/**
 * `npm run build`: emits the client (`client/mod.ts`), the CLI and the server as JavaScript and
 * declarations into `dist/`, with the generated files and the Python worker harness they load, so other
 * services use `runplane/client` from plain Node and production runs `node dist/server/main.js` without
 * tsx (a smaller, faster-starting process).
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
for (const file of ["api.d.ts", "validators.cjs", "validators.d.cts"]) {
  cpSync(join(ROOT, "generated", file), join(dist, "generated", file));
}
cpSync(join(ROOT, "server", "runtime", "_worker.py"), join(dist, "server", "runtime", "_worker.py"));
console.error(`Built the client, the CLI and the server into ${dist}`);
