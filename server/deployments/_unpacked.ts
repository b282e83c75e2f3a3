/**
 * Bundles this host unpacked when they were uploaded, kept for their build. An upload is unpacked once to
 * check it; the process that accepted it usually builds it too, and takes that folder (a rename) instead
 * of reading the bundle back from the store and unpacking it again: half the bytes through the gunzip
 * and the store per upload, and a faster build. Any other host unpacks from the store, as before.
 *
 * A kept folder is keyed by the bundle's digest (its bytes were checked against it as they arrived), so
 * the first build of that bundle on this host takes it, whichever deployment it is for. One that no build
 * here takes (another host built it, or the store refused the deployment) is removed after a while.
 */
import { mkdir, readdir, rename, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";

/** How long a kept folder waits for its build before any later upload removes it. */
export const UNPACKED_KEPT_MS = 60 * 60 * 1000;

function unpackedDir(dataDir: string, digest: string): string {
  return join(dataDir, "unpacked", digest.replace(/^sha256:/, ""));
}

/**
 * Keeps `scratch` (an upload's checked unpacking) for the build of `digest`; removes it instead when it
 * cannot be kept (one is kept already, or the folder cannot be made: the build then reads the store).
 * Returns a function that removes what was kept (when the deployment was not stored).
 */
export async function keepUnpacked(
  dataDir: string,
  options: { scratch: string; digest: string },
): Promise<() => Promise<void>> {
  const kept = unpackedDir(dataDir, options.digest);
  try {
    await mkdir(dirname(kept), { recursive: true });
    await rename(options.scratch, kept);
  } catch {
    await rm(options.scratch, { recursive: true, force: true });
    return async () => {};
  }
  return () => rm(kept, { recursive: true, force: true });
}

/**
 * Moves the kept unpacking of `digest` to `dir` (which must not exist). Returns false when this host
 * kept none (or another build took it first): the caller unpacks from the store.
 */
export async function takeUnpacked(dataDir: string, options: { digest: string; dir: string }): Promise<boolean> {
  await mkdir(dirname(options.dir), { recursive: true });
  try {
    await rename(unpackedDir(dataDir, options.digest), options.dir);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") return false;
    throw error;
  }
}

/** Removes kept folders older than `olderThanMs` (all of them with 0, as a process starts). */
export async function sweepUnpacked(dataDir: string, options: { olderThanMs: number; now: number }): Promise<void> {
  const root = join(dataDir, "unpacked");
  const names = await readdir(root).catch(() => [] as string[]);
  await Promise.all(names.map(async (name) => {
    const path = join(root, name);
    // 0 is every folder whatever the clock says: a clock stepped back (or a folder's time set ahead of
    // `now`) must not keep a previous process's folders at a start.
    const old = options.olderThanMs <= 0
      || await stat(path).then((s) => options.now - s.mtimeMs >= options.olderThanMs, () => false);
    if (old) await rm(path, { recursive: true, force: true });
  }));
}
