/**
 * Installs the project's own `npm pack` tarball into a scratch project without asking npm to resolve
 * anything: the tarball is extracted into `node_modules/runplane`, and each runtime dependency it declares
 * is a symlink to the checkout's installed copy (Node and tsc follow symlinks to their real path, so
 * transitive dependencies resolve from the checkout's `node_modules` too). Only the checkout and what
 * `npm ci` installed are used: not the npm cache, not the registry.
 */
import { execFile } from "node:child_process";
import { mkdir, readdir, readFile, symlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The checkout's root folder. */
export const ROOT: string = join(import.meta.dirname, "..", "..");

/** What {@link installPackedPackage} made. */
export interface PackedPackage {
  /** The tarball's path (inside the scratch project). */
  tarball: string;
  /** Every file in the tarball, relative to the package root, sorted. */
  files: string[];
  /** The installed package's folder: `<dir>/node_modules/<name>`. */
  packageDir: string;
  /** The runtime dependencies linked from the checkout. */
  dependencies: string[];
}

/**
 * Packs the checkout (or the workspace package at `options.source`) as npm would publish it (`npm pack`
 * runs `prepack`, which builds `dist/`) into the scratch project `dir`, and installs it there as described
 * in the module comment; a second package packed into the same project is installed beside the first. npm runs offline with
 * an empty cache of its own inside `dir`, so a pack that needed the network or a warm cache fails here.
 */
export async function installPackedPackage(
  dir: string,
  options: { source?: string } = {},
): Promise<PackedPackage> {
  const source = options.source ?? ROOT;
  const env = { ...process.env, npm_config_cache: join(dir, ".npm-cache"), npm_config_offline: "true" };
  const before = new Set(await readdir(dir));
  await run("npm", ["pack", "--pack-destination", dir], { cwd: source, env });
  const name = (await readdir(dir)).find((f) => f.endsWith(".tgz") && !before.has(f));
  if (!name) throw new Error("npm pack wrote no tarball");
  const tarball = join(dir, name);

  const { stdout } = await run("tar", ["-tzf", tarball]);
  const files = stdout.split("\n").filter((line) => line && !line.endsWith("/"))
    .map((line) => line.replace(/^package\//, "")).sort();

  const manifest = JSON.parse(await readFile(join(source, "package.json"), "utf8")) as { name: string };
  const packageDir = join(dir, "node_modules", manifest.name);
  await mkdir(packageDir, { recursive: true });
  await run("tar", ["-xzf", tarball, "-C", packageDir, "--strip-components=1"]);

  // The tarball's own package.json says what it needs at run time, not the checkout's.
  const packed = JSON.parse(await readFile(join(packageDir, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
  };
  const dependencies = Object.keys(packed.dependencies ?? {}).sort();
  for (const dependency of dependencies) {
    const link = join(dir, "node_modules", dependency);
    await mkdir(dirname(link), { recursive: true });
    // A package packed into the same project earlier may have linked it (or be it) already.
    await symlink(join(ROOT, "node_modules", dependency), link, "dir").catch((error: NodeJS.ErrnoException) => {
      if (error.code !== "EEXIST") throw error;
    });
  }
  return { tarball, files, packageDir, dependencies };
}
