/**
 * The checkout's compiled CLI: `server/cli/mod.ts` and what it loads, bundled by esbuild into
 * `node_modules/.cache/runplane-cli/<sources>/` (one chunk per command, loaded as that command runs;
 * packages are imported from `node_modules` as the sources import them). Not in `dist/`, which `npm run
 * build` empties and `npm pack` packs. `<sources>` names the state of the sources it was built from (the
 * newest change time and the number of the TypeScript files under client/, server/ and generated/), so an
 * edit makes a new one. Plain JavaScript: the bin loads it without tsx. `npm ci` builds it (`prepare`), so does `node
 * scripts/build_cli.mjs`, and the bin when it finds none current.
 *
 * Each build also writes `<builds>/current.json`: the build's name and, for each source file esbuild read
 * (its metafile's inputs, outside node_modules), that file's change time as it was before the build. The
 * bin (client/runplane.mjs, currentBuild) stats only those files, without loading this module or scanning
 * the folders (a scan and this module's import were ~20 ms of a 258 ms `runplane apps list`), and builds
 * again when any of them changed or is gone: an edit made during a build leaves the build stale, and a
 * file that no source imports cannot change what the CLI does.
 */
import { existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const SOURCE_FOLDERS = ["client", "server", "generated"];
const SOURCE_FILE = /\.(ts|cjs|mts|json)$/;
/** Builds older than this are removed by a later build (a CLI still running one has loaded it by then). */
const OLD_BUILD_MS = 3_600_000;

/** The change time (mtimeMs) of each source file under `root`, by its path relative to `root`. */
function sourceTimes(root) {
  const times = new Map();
  for (const folder of SOURCE_FOLDERS) {
    for (const entry of readdirSync(join(root, folder), { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !SOURCE_FILE.test(entry.name) || entry.name.endsWith(".d.ts")) continue;
      const path = join(entry.parentPath, entry.name);
      times.set(relative(root, path), statSync(path).mtimeMs);
    }
  }
  return times;
}

/** The name of the build for sources with these change times: `<newest mtime>-<file count>`. */
function sourcesKey(times) {
  let newest = 0;
  for (const mtime of times.values()) if (mtime > newest) newest = mtime;
  return `${Math.floor(newest)}-${times.size}`;
}

/** Where the builds of the checkout at `root` go. */
function buildsFolder(root) {
  return join(root, "node_modules", ".cache", "runplane-cli");
}

/**
 * Builds the CLI of the checkout at `root` into `<builds>/<key>/` (in a scratch folder renamed into place,
 * so a CLI starting meanwhile never loads half of it) and returns its entry. Throws when esbuild is not
 * installed (`npm ci --omit=dev`) or the sources do not build; `options.quiet` keeps esbuild's messages off
 * stderr (the bin's, where a command's output is its own).
 */
export async function buildCli(root, options = {}) {
  const { build } = await import("esbuild");
  const times = sourceTimes(root);
  const key = sourcesKey(times);
  const folder = buildsFolder(root);
  const target = join(folder, key);
  const scratch = `${target}.${process.pid}.tmp`;
  rmSync(scratch, { recursive: true, force: true });
  const { metafile } = await build({
    absWorkingDir: root,
    metafile: true,
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
  writeManifest(folder, { build: key, inputs: inputTimes(root, metafile, times) });
  removeOldBuilds(folder, key);
  return join(target, "mod.js");
}

/** Each source file a build read (outside node_modules), with its change time from before the build. */
function inputTimes(root, metafile, times) {
  const inputs = {};
  for (const path of Object.keys(metafile.inputs)) {
    if (path.startsWith("node_modules/")) continue;
    inputs[path] = times.get(path) ?? statSync(join(root, path)).mtimeMs;
  }
  return inputs;
}

/** Writes `<builds>/current.json` whole or not at all (a scratch file renamed over it). */
function writeManifest(folder, manifest) {
  const scratch = join(folder, `current.json.${process.pid}.tmp`);
  writeFileSync(scratch, `${JSON.stringify(manifest)}\n`);
  renameSync(scratch, join(folder, "current.json"));
}

function removeOldBuilds(folder, keep) {
  for (const name of readdirSync(folder)) {
    if (name === keep || name === "current.json") continue;
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
