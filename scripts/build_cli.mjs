/**
 * The checkout's compiled CLI: `server/cli/mod.ts` and what it loads, bundled by esbuild into
 * `node_modules/.cache/runplane-cli/<sources>/` (one chunk per command, loaded as that command runs;
 * packages are imported from `node_modules` as the sources import them). Not in `dist/`, which `npm run
 * build` empties and `npm pack` packs. `<sources>` names the state of the sources it was built from (the newest change time
 * and the number of the TypeScript files under client/, server/ and generated/), so `client/runplane.mjs`
 * finds a current build with one scan of those folders (~10 ms) and an edit makes a new one. Plain
 * JavaScript: the bin loads it without tsx. `npm ci` builds it (`prepare`), so does `node
 * scripts/build_cli.mjs`, and the bin when it finds none current.
 */
import { existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const SOURCE_FOLDERS = ["client", "server", "generated"];
const SOURCE_FILE = /\.(ts|cjs|mts|json)$/;
/** Builds older than this are removed by a later build (a CLI still running one has loaded it by then). */
const OLD_BUILD_MS = 3_600_000;

/** The name of the build the sources under `root` now call for: `<newest mtime>-<file count>`. */
export function sourcesKey(root) {
  let newest = 0;
  let count = 0;
  for (const folder of SOURCE_FOLDERS) {
    for (const entry of readdirSync(join(root, folder), { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !SOURCE_FILE.test(entry.name) || entry.name.endsWith(".d.ts")) continue;
      const mtime = statSync(join(entry.parentPath, entry.name)).mtimeMs;
      count++;
      if (mtime > newest) newest = mtime;
    }
  }
  return `${Math.floor(newest)}-${count}`;
}

/** Where the builds of the checkout at `root` go. */
function buildsFolder(root) {
  return join(root, "node_modules", ".cache", "runplane-cli");
}

/** The entry of the current build under `root` (`<builds>/<key>/mod.js`), or undefined if none is built. */
export function currentCliBuild(root) {
  const entry = join(buildsFolder(root), sourcesKey(root), "mod.js");
  return existsSync(entry) ? entry : undefined;
}

/**
 * Builds the CLI of the checkout at `root` into `<builds>/<key>/` (in a scratch folder renamed into place,
 * so a CLI starting meanwhile never loads half of it) and returns its entry. Throws when esbuild is not
 * installed (`npm ci --omit=dev`) or the sources do not build; `options.quiet` keeps esbuild's messages off
 * stderr (the bin's, where a command's output is its own).
 */
export async function buildCli(root, options = {}) {
  const { build } = await import("esbuild");
  const key = sourcesKey(root);
  const folder = buildsFolder(root);
  const target = join(folder, key);
  const scratch = `${target}.${process.pid}.tmp`;
  rmSync(scratch, { recursive: true, force: true });
  await build({
    entryPoints: [join(root, "server", "cli", "mod.ts")],
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    packages: "external",
    outdir: scratch,
    logLevel: options.quiet ? "silent" : "error",
  });
  writeFileSync(join(scratch, "package.json"), '{ "type": "module" }\n');
  try {
    renameSync(scratch, target);
  } catch {
    // Another CLI built the same sources first: its build is this one.
    rmSync(scratch, { recursive: true, force: true });
  }
  removeOldBuilds(folder, key);
  return join(target, "mod.js");
}

function removeOldBuilds(folder, keep) {
  for (const name of readdirSync(folder)) {
    if (name === keep) continue;
    const path = join(folder, name);
    try {
      if (Date.now() - statSync(path).mtimeMs > OLD_BUILD_MS) rmSync(path, { recursive: true, force: true });
    } catch {
      // Removed by another build meanwhile.
    }
  }
}

if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) {
  const root = fileURLToPath(new URL("..", import.meta.url));
  try {
    console.error(`Built the CLI into ${await buildCli(root)}`);
  } catch (error) {
    // `prepare` on an install without devDependencies: the bin runs the sources through tsx instead.
    console.error(`Not building the CLI (${error.message}): runplane will run its sources through tsx`);
  }
}
