/**
 * `npm run build`: emits the client (`client/mod.ts`), the CLI and the server as JavaScript and
 * declarations into `dist/`, with the generated files, the Python files and the dashboard's
 * files they load, so other services use `runplane/client` from plain Node and production runs
 * `node dist/server/main.js` without tsx (a smaller, faster-starting process).
 */
import { execFileSync } from "node:child_process";
import { cpSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));

/**
 * Builds into `outDir` (default `dist/`, emptied first). An `outDir` elsewhere must lie inside the
 * checkout, where the built server finds the packages of its `node_modules`.
 */
export function buildDist(outDir: string = join(ROOT, "dist")): void {
  rmSync(outDir, { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  execFileSync(process.execPath, [tsc, "-p", join(ROOT, "tsconfig.build.json"), "--outDir", outDir], {
    cwd: ROOT,
    stdio: "inherit",
  });
  for (const file of ["api.d.ts", "validators.cjs", "validators.d.cts"]) {
    cpSync(join(ROOT, "generated", file), join(outDir, "generated", file));
  }
  // The Python files the server runs beside its modules: the worker harness, the custom runtime's relay,
  // the sandbox's seccomp filter.
  for (const file of ["runtime/_worker.py", "runtime/_relay.py", "sandbox/_seccomp.py"]) {
    cpSync(join(ROOT, "server", file), join(outDir, "server", file));
  }
  // The server serves the dashboard from `client/dashboard/` beside its own folder (server/http/dashboard.ts).
  cpSync(join(ROOT, "client", "dashboard"), join(outDir, "client", "dashboard"), {
    recursive: true,
    filter: (source) => !source.endsWith(".d.ts"),
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  buildDist();
  console.error(`Built the client, the CLI and the server into ${join(ROOT, "dist")}`);
}
