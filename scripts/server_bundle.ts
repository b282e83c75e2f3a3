/**
 * The server as one JavaScript file, for the tests that start it as a process (`npm test` builds it once,
 * `test/_helpers/server_process.ts` runs it). Started through tsx, the server loads ~600 modules through
 * tsx's loader thread: ~1 s of CPU before it listens, and the suite starts it ~45 times. The bundle is the
 * same esbuild transform that tsx applies file by file, joined into one file: it listens in about half the
 * time and CPU (measured: 960 → 510 ms to listening).
 *
 * Packages stay imports of `node_modules`, so the bundle must live inside the checkout (the runner puts it in
 * `node_modules/.cache/`). Each module keeps its own `import.meta.url` (`dirname`, `filename`), made a
 * literal of its source path, so the files found beside a module (the Python worker, the dashboard) are
 * found as from the sources; the entry keeps the bundle's own, because it checks that it was run as the main
 * module. `require` is defined for the generated validators, which are CommonJS.
 */
import { build } from "esbuild";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { ROOT } from "./generate.ts";

const ENTRY = join(ROOT, "server", "main.ts");
const SOURCES = new RegExp(`^${join(ROOT, "server").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/.*\\.ts$`);

/** Bundles `server/main.ts` into `outfile` (which must lie inside the checkout). */
export async function bundleServer(outfile: string): Promise<void> {
  await build({
    entryPoints: [ENTRY],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    logLevel: "warning",
    banner: {
      js: `import { createRequire as runplaneCreateRequire } from "node:module";\n`
        + `const require = runplaneCreateRequire(import.meta.url);`,
    },
    plugins: [{
      name: "runplane-source-meta",
      setup(bundler) {
        bundler.onLoad({ filter: SOURCES }, async ({ path }) => {
          if (path === ENTRY) return undefined;
          const source = await readFile(path, "utf8");
          const contents = source
            .replaceAll("import.meta.url", JSON.stringify(pathToFileURL(path).href))
            .replaceAll("import.meta.dirname", JSON.stringify(dirname(path)))
            .replaceAll("import.meta.filename", JSON.stringify(path));
          return { contents, loader: "ts" };
        });
      },
    }],
  });
}
