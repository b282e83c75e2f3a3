/**
 * `npm run build`: emits the client (`client/mod.ts`), the CLI and the server as JavaScript and
 * declarations into `dist/`, with the generated files, the Python files and the dashboard's
 * files they load, so other services use `runplane/client` from plain Node and production runs
 * `node dist/server/main.js` without tsx (a smaller, faster-starting process).
 *
 * The compiled tree is kept in `node_modules/.cache/runplane-dist/<hash>/`, `<hash>` being a SHA-256 of
 * every file the build reads (client/, server/, generated/, the tsconfigs, package-lock.json and this
 * script): a build of sources already built is a copy (tsc costs ~22 s of CPU; `npm test` built the same
 * sources twice, once in `npm pack`'s prepack and once in the production build's test). Concurrent builds
 * of the same sources compile once: the first takes a lock file, the others wait for its tree.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = dirname(dirname(fileURLToPath(import.meta.url)));
const CACHE = join(ROOT, "node_modules", ".cache", "runplane-dist");
/** Every file under these folders is an input of the build (sources, Python files, the dashboard). */
const INPUT_FOLDERS = ["client", "server", "generated"];
const INPUT_FILES = ["tsconfig.json", "tsconfig.build.json", "package-lock.json", "scripts/build.ts"];
/** Trees not used for this long are removed by a later build of other sources. */
const OLD_BUILD_MS = 3_600_000;
/** How long a build waits for another one's lock before it fails. */
const LOCK_WAIT_MS = 15 * 60_000;
/** A lock file that names no process yet after this long was left by a build that died while taking it. */
const LOCK_UNNAMED_MS = 10_000;

/** The SHA-256 (hex, shortened) of every input file's path and bytes, in a fixed order. */
export function buildInputsHash(root: string = ROOT): string {
  const files = [...INPUT_FILES];
  for (const folder of INPUT_FOLDERS) {
    for (const entry of readdirSync(join(root, folder), { recursive: true, withFileTypes: true })) {
      // Python's bytecode caches are written by runs, not read by the build.
      if (entry.isFile() && !entry.parentPath.includes("__pycache__")) {
        files.push(relative(root, join(entry.parentPath, entry.name)));
      }
    }
  }
  const hash = createHash("sha256");
  for (const file of files.sort()) {
    const bytes = existsSync(join(root, file)) ? readFileSync(join(root, file)) : Buffer.alloc(0);
    hash.update(`${file}\0${bytes.length}\0`).update(bytes);
  }
  return hash.digest("hex").slice(0, 32);
}

function runNode(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, stdio: "inherit" });
    child.once("error", reject);
    child.once("exit", (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`node ${args.slice(0, 2).join(" ")} failed (${signal ?? `exit code ${code}`})`));
    });
  });
}

/** Compiles into `outDir` (which must not exist) and copies beside the modules the files they load. */
async function compile(outDir: string): Promise<void> {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  await runNode([tsc, "-p", join(ROOT, "tsconfig.build.json"), "--outDir", outDir]);
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

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Takes the lock file `lock` for this process (true), or finds it held (false). A lock whose process died is
 * removed, so the next try takes it; so is one that names no process some seconds after it was made.
 */
export function takeBuildLock(lock: string): boolean {
  try {
    writeFileSync(lock, String(process.pid), { flag: "wx" });
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  try {
    const pid = Number(readFileSync(lock, "utf8"));
    const stale = pid > 0 ? !alive(pid) : Date.now() - statSync(lock).mtimeMs > LOCK_UNNAMED_MS;
    if (stale) rmSync(lock, { force: true });
  } catch {
    // Released meanwhile: the next try takes it.
  }
  return false;
}

function removeOldBuilds(keep: string): void {
  for (const name of readdirSync(CACHE)) {
    if (name === keep || name.startsWith(`${keep}.`)) continue;
    const path = join(CACHE, name);
    try {
      if (Date.now() - statSync(path).mtimeMs > OLD_BUILD_MS) rmSync(path, { recursive: true, force: true });
    } catch {
      // Removed by another build meanwhile.
    }
  }
}

/**
 * The cached tree of the current sources (`<cache>/<hash>/`), compiled first if there is none: in a scratch
 * folder renamed into place, under `<hash>.lock`, so a concurrent build waits and then copies it.
 */
export async function cachedBuild(): Promise<string> {
  const key = buildInputsHash();
  const tree = join(CACHE, key);
  const lock = `${tree}.lock`;
  mkdirSync(CACHE, { recursive: true });
  const deadline = Date.now() + LOCK_WAIT_MS;
  while (!existsSync(tree)) {
    if (takeBuildLock(lock)) {
      const scratch = `${tree}.${process.pid}.tmp`;
      try {
        rmSync(scratch, { recursive: true, force: true });
        if (!existsSync(tree)) {
          await compile(scratch);
          renameSync(scratch, tree);
        }
      } finally {
        rmSync(scratch, { recursive: true, force: true });
        rmSync(lock, { force: true });
      }
    } else if (Date.now() > deadline) {
      throw new Error(`Another build held ${lock} for ${LOCK_WAIT_MS / 60_000} minutes: remove it if none runs`);
    } else {
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  // Its age is its last use: a tree in use is not removed as old.
  const now = new Date();
  utimesSync(tree, now, now);
  removeOldBuilds(key);
  return tree;
}

/**
 * Builds into `outDir` (default `dist/`, emptied first): a copy of the current sources' cached tree, compiled
 * first if there is none. An `outDir` elsewhere must lie inside the checkout, where the built server finds
 * the packages of its `node_modules`.
 */
export async function buildDist(outDir: string = join(ROOT, "dist")): Promise<void> {
  const tree = await cachedBuild();
  rmSync(outDir, { recursive: true, force: true });
  cpSync(tree, outDir, { recursive: true });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await buildDist();
  console.error(`Built the client, the CLI and the server into ${join(ROOT, "dist")}`);
}
