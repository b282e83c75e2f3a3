/**
 * A volume's files as the API reads and writes them, without ever following a link. A tenant's replica
 * writes in its volume and may put links there (to `/etc`, to another project's volume); this server runs
 * as root, so it must never resolve one. Every path is walked name by name from an open folder: each
 * folder is opened with `O_DIRECTORY | O_NOFOLLOW` through `/proc/self/fd/<fd>/<name>` (the kernel resolves
 * that from the folder the descriptor holds, as `openat` would), and the file itself with `O_NOFOLLOW`; a
 * link anywhere on the way is a 400, and a replica swapping a folder for a link meanwhile gains nothing:
 * the descriptors already held are the folders that were checked.
 *
 * An upload is written to a temporary name (`.rp-upload-…`) in its folder, synced, then renamed over the
 * path: a reader or a listing never sees half a file, and a failed or interrupted upload is removed. Each
 * uploaded file's SHA-256 is kept in a sidecar outside `files/` (`<volume>/sums/`, which replicas are never
 * shown), valid while the file's size and modification time are those it was recorded with.
 */
import { createHash, randomBytes } from "node:crypto";
import { constants, type Stats, statfsSync } from "node:fs";
import {
  type FileHandle,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  unlink,
  writeFile,
} from "node:fs/promises";
import { join } from "node:path";
import { ProblemError } from "../problems/mod.ts";
import { UPLOAD_PREFIX } from "./_volume_checks.ts";
import type { VolumeOwner, VolumePaths, VolumesMode } from "./_volume_disk.ts";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_WRONLY, O_CREAT, O_EXCL } = constants;

/** `name` inside the folder `dir` holds open, resolved from that folder and not from its path. */
function at(dir: FileHandle, name: string): string {
  return `/proc/self/fd/${dir.fd}/${name}`;
}

function linkRefused(path: string): ProblemError {
  return new ProblemError(
    "validation",
    `The path ${JSON.stringify(path)} is refused: it goes through a link, which the server never follows`,
    { errors: [{ path: "path.path", message: "a name on the way is a link" }] },
  );
}

function notFound(path: string): ProblemError {
  return new ProblemError("not-found", `The volume has no file ${JSON.stringify(path)}`);
}

/** Why opening `name` in `dir` as a folder failed: a link (400), a file on the way (409 or 404), or nothing there. */
async function folderRefusal(dir: FileHandle, name: string, path: string): Promise<ProblemError | null> {
  let stats: Stats;
  try {
    stats = await lstat(at(dir, name));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
  if (stats.isSymbolicLink()) return linkRefused(path);
  if (stats.isDirectory()) return null;
  return new ProblemError("conflict", `The path ${JSON.stringify(path)} goes through ${name}, which is a file`);
}

/**
 * Opens the folder `names` below `root` (itself opened without following a link), making missing folders
 * (owned by `owner`) when `create`. Throws a 400 for a link on the way, 409 for a file on the way, 404 for a
 * missing folder when not creating.
 */
export async function openFolder(
  root: string,
  names: string[],
  options: { path: string; create?: VolumeOwner },
): Promise<FileHandle> {
  let dir = await open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  try {
    for (const name of names) {
      let next: FileHandle | undefined;
      for (let attempt = 0; next === undefined; attempt++) {
        try {
          next = await open(at(dir, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code;
          if (code !== "ENOENT" && code !== "ENOTDIR" && code !== "ELOOP") throw error;
          const refusal = await folderRefusal(dir, name, options.path);
          if (refusal) throw refusal;
          if (!options.create || attempt > 2) throw notFound(options.path);
          await mkdir(at(dir, name), { mode: 0o755 }).catch((e: NodeJS.ErrnoException) => {
            if (e.code !== "EEXIST") throw e;
          });
          const made = await open(at(dir, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
          await made.chown(options.create.uid, options.create.gid);
          next = made;
        }
      }
      await dir.close();
      dir = next;
    }
    return dir;
  } catch (error) {
    await dir.close();
    throw error;
  }
}

/** What an upload wrote. */
export interface WrittenFile {
  size: number;
  sha256: string;
  /** False when it replaced a file. */
  created: boolean;
}

function tooLarge(freeBytes: number): ProblemError {
  return new ProblemError(
    "content-too-large",
    `The file does not fit in the volume: it had room for ${freeBytes} bytes; delete files or make a larger volume`,
  );
}

/**
 * How much of a body past the volume's room is still read (and dropped) before the upload is refused
 * anyway: a client still sending then reads the 413 instead of a reset connection.
 */
const DRAIN_BYTES = 16 * 1024 * 1024;

/** How many bytes of a body are gathered into one write (a `writev` of its chunks). */
const WRITE_BATCH_BYTES = 1024 * 1024;

/** Writes all of `chunks` at the file's position (a short write continues where it stopped). */
async function writeAll(handle: FileHandle, chunks: Uint8Array[]): Promise<void> {
  let rest = chunks;
  while (rest.length > 0) {
    let { bytesWritten } = await handle.writev(rest);
    while (rest.length > 0 && bytesWritten >= rest[0].length) {
      bytesWritten -= rest[0].length;
      rest = rest.slice(1);
    }
    if (bytesWritten > 0) rest = [rest[0].subarray(bytesWritten), ...rest.slice(1)];
  }
}

/**
 * Writes `source` into `handle` as it arrives, hashing it; refuses it past `limitBytes` or at `ENOSPC`.
 * One write is in flight while the next batch gathers (at most ~2 × `WRITE_BATCH_BYTES` held): the request
 * is read no faster than the disk takes it (its socket pushes back on the client), and the disk is never
 * idle waiting for a socket chunk of 64 KiB to be written alone. It settles only once no write is in
 * flight, however it ends: the caller closes `handle` next. Exported for its tests.
 */
export async function copyInto(
  handle: FileHandle,
  source: AsyncIterable<Uint8Array>,
  limitBytes: number,
): Promise<{ size: number; sha256: string }> {
  const hash = createHash("sha256");
  let size = 0;
  let refusal: ProblemError | undefined;
  let dropped = 0;
  let batch: Uint8Array[] = [];
  let batchBytes = 0;
  // The write in flight, as its failure (undefined when it succeeded): its promise is observed the moment
  // it is made, since the loop may wait for the body's next chunk longer than the disk takes to fail, and
  // a rejection unobserved meanwhile is an unhandled rejection.
  let inFlight: Promise<unknown> = Promise.resolve(undefined);
  let written = 0; // bytes of the batches already written
  // Waits for the write in flight; at ENOSPC the upload is refused (the rest of the body drained).
  async function settle(): Promise<void> {
    const error = await inFlight;
    inFlight = Promise.resolve(undefined);
    if (error === undefined) return;
    if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
    refusal ??= tooLarge(written);
  }
  async function flush(): Promise<void> {
    await settle();
    if (refusal || batch.length === 0) return;
    const chunks = batch;
    const bytes = batchBytes;
    batch = [];
    batchBytes = 0;
    inFlight = writeAll(handle, chunks).then(() => {
      written += bytes;
      return undefined;
    }, (error: unknown) => error ?? new Error("a write failed"));
  }
  try {
    for await (const chunk of source) {
      size += chunk.length;
      if (!refusal && size > limitBytes) refusal = tooLarge(limitBytes);
      if (refusal) {
        dropped += chunk.length;
        if (dropped > DRAIN_BYTES) throw refusal;
        continue;
      }
      hash.update(chunk);
      batch.push(chunk);
      batchBytes += chunk.length;
      if (batchBytes >= WRITE_BATCH_BYTES) await flush();
    }
    await flush();
    await settle();
  } catch (error) {
    // A refusal past the drain, or a body that broke off, may leave a write in flight: wait for it, or the
    // caller would close the handle under it.
    await inFlight;
    throw error;
  }
  if (refusal) throw refusal;
  return { size, sha256: hash.digest("hex") };
}

/** The sidecar file of `path`'s SHA-256. */
function sumPath(paths: VolumePaths, path: string): string {
  return join(paths.root, "sums", createHash("sha256").update(path).digest("hex"));
}

/** The recorded SHA-256 of `path`, when the file is still the one it was recorded for. */
export async function recordedSha256(paths: VolumePaths, path: string, stats: Stats): Promise<string | undefined> {
  try {
    const sum = JSON.parse(await readFile(sumPath(paths, path), "utf8")) as Record<string, unknown>;
    const same = sum.path === path && sum.size === stats.size && sum.mtimeMs === stats.mtimeMs;
    return same && typeof sum.sha256 === "string" ? sum.sha256 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Writes `source` to the file `names` of volume `paths` (see the module's comment). `limitBytes`: the most
 * the volume can take (413 past it, as for `ENOSPC`); the temporary file is removed on any failure.
 */
export async function writeVolumeFile(
  paths: VolumePaths,
  file: { path: string; names: string[]; source: AsyncIterable<Uint8Array> },
  options: { limitBytes: number; owner: VolumeOwner },
): Promise<WrittenFile> {
  const dir = await openFolder(paths.files, file.names.slice(0, -1), { path: file.path, create: options.owner });
  const name = file.names.at(-1)!;
  const temporary = `${UPLOAD_PREFIX}${randomBytes(12).toString("hex")}`;
  try {
    const existing = await lstat(at(dir, name)).catch(() => undefined);
    if (existing?.isSymbolicLink()) throw linkRefused(file.path);
    if (existing?.isDirectory()) {
      throw new ProblemError("conflict", `The path ${JSON.stringify(file.path)} is a folder`);
    }
    const handle = await open(at(dir, temporary), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o644);
    let written: { size: number; sha256: string };
    try {
      written = await copyInto(handle, file.source, options.limitBytes);
      await handle.sync();
      await handle.chown(options.owner.uid, options.owner.gid);
    } finally {
      await handle.close();
    }
    const stats = await lstat(at(dir, temporary));
    await rename(at(dir, temporary), at(dir, name));
    await dir.sync();
    await mkdir(join(paths.root, "sums"), { recursive: true, mode: 0o700 });
    const sum = { path: file.path, size: stats.size, mtimeMs: stats.mtimeMs, sha256: written.sha256 };
    await writeFile(sumPath(paths, file.path), JSON.stringify(sum), { mode: 0o600 });
    return { ...written, created: existing === undefined };
  } catch (error) {
    await unlink(at(dir, temporary)).catch(() => {});
    if ((error as NodeJS.ErrnoException).code === "ENOSPC") throw tooLarge(0);
    throw error;
  } finally {
    await dir.close();
  }
}

/** An open file of a volume, to stream. */
export interface OpenedFile {
  handle: FileHandle;
  size: number;
  sha256: string | undefined;
}

/** Opens the file `names` of volume `paths` for reading (404 for none or a folder, 400 through a link). */
export async function openVolumeFile(paths: VolumePaths, file: { path: string; names: string[] }): Promise<OpenedFile> {
  const dir = await openFolder(paths.files, file.names.slice(0, -1), { path: file.path });
  try {
    const name = file.names.at(-1)!;
    let handle: FileHandle;
    try {
      handle = await open(at(dir, name), O_RDONLY | O_NOFOLLOW);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ELOOP") throw linkRefused(file.path);
      if (code === "ENOENT") throw notFound(file.path);
      throw error;
    }
    const stats = await handle.stat();
    if (!stats.isFile()) {
      await handle.close();
      throw notFound(file.path);
    }
    return { handle, size: stats.size, sha256: await recordedSha256(paths, file.path, stats) };
  } finally {
    await dir.close();
  }
}

/** Removes the file `names` of volume `paths`: false when there is none (a folder is not a file). */
export async function deleteVolumeFile(paths: VolumePaths, file: { path: string; names: string[] }): Promise<boolean> {
  let dir: FileHandle;
  try {
    dir = await openFolder(paths.files, file.names.slice(0, -1), { path: file.path });
  } catch (error) {
    if (error instanceof ProblemError && error.status !== 400) return false;
    throw error;
  }
  try {
    const name = file.names.at(-1)!;
    const stats = await lstat(at(dir, name)).catch(() => undefined);
    if (stats?.isSymbolicLink()) throw linkRefused(file.path);
    if (!stats?.isFile()) return false;
    await unlink(at(dir, name));
    await rm(sumPath(paths, file.path), { force: true });
    return true;
  } finally {
    await dir.close();
  }
}

/** A file as listed. */
export interface ListedFile {
  path: string;
  size: number;
  modified: Date;
  sha256?: string;
}

/** Could a path below `folder` (`""` or `a/b/`) start with `prefix`? */
function mayHold(folder: string, prefix: string): boolean {
  return folder.startsWith(prefix) || prefix.startsWith(folder);
}

/** Every regular file under `dir` (held open) whose path starts with `prefix`, with its stats; links and uploads skipped. */
async function walk(dir: FileHandle, folder: string, prefix: string, out: Array<{ path: string; stats: Stats }>) {
  const entries = await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true });
  for (const entry of entries) {
    const path = `${folder}${entry.name}`;
    if (entry.isFile() && !entry.name.startsWith(UPLOAD_PREFIX) && path.startsWith(prefix)) {
      const stats = await lstat(at(dir, entry.name)).catch(() => undefined);
      if (stats?.isFile()) out.push({ path, stats });
    } else if (entry.isDirectory() && mayHold(`${path}/`, prefix)) {
      const sub = await open(at(dir, entry.name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch(() => undefined);
      if (!sub) continue;
      try {
        await walk(sub, `${path}/`, prefix, out);
      } finally {
        await sub.close();
      }
    }
  }
}

/**
 * Removes the uploads a dead server left in volume `paths` (`.rp-upload-…` files, which count against the
 * volume's size) last modified before `before` (Unix ms), walking it as `walk` does (never through a link);
 * resolves with how many it removed. An upload under way writes its temporary as its body arrives, so only
 * one that stopped long ago, or any where nothing can be writing (a volume just mounted), is old enough.
 */
export async function sweepUploads(paths: VolumePaths, options: { before: number }): Promise<number> {
  let removed = 0;
  async function sweep(dir: FileHandle): Promise<void> {
    for (const entry of await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true })) {
      if (entry.isFile() && entry.name.startsWith(UPLOAD_PREFIX)) {
        const stats = await lstat(at(dir, entry.name)).catch(() => undefined);
        if (!stats?.isFile() || stats.mtimeMs >= options.before) continue;
        await unlink(at(dir, entry.name)).then(() => removed++, () => {});
      } else if (entry.isDirectory()) {
        const sub = await open(at(dir, entry.name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch(() => undefined);
        if (!sub) continue;
        try {
          await sweep(sub);
        } finally {
          await sub.close();
        }
      }
    }
  }
  const root = await open(paths.files, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  try {
    await sweep(root);
  } finally {
    await root.close();
  }
  return removed;
}

/** What one page of a listing looks for: paths starting `prefix`, past `after`, until `wanted` are found. */
interface PageQuery {
  prefix: string;
  after: string | undefined;
  wanted: number;
}

/**
 * The files under `dir` (held open, at path `folder`) that `query` wants, appended to `out` in path order,
 * stopping once it has `wanted`. Each folder's entries are visited in the order of their paths (a folder's
 * name compared as `name/`, so `a/x` comes after `a-c` as the strings do), and a folder whose paths all
 * come before `after`, or none of which can start with `prefix`, is never opened: a page reads the part
 * of the volume it shows, not all of it.
 */
async function walkPage(
  dir: FileHandle,
  options: { folder: string; query: PageQuery; out: Array<{ path: string; stats: Stats }> },
) {
  const { folder, query, out } = options;
  const entries = (await readdir(`/proc/self/fd/${dir.fd}`, { withFileTypes: true }))
    .filter((entry) => entry.isFile() || entry.isDirectory())
    .map((entry) => ({ entry, key: entry.isDirectory() ? `${entry.name}/` : entry.name }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (const { entry, key } of entries) {
    if (out.length >= query.wanted) return;
    const path = `${folder}${key}`;
    const { after, prefix } = query;
    if (entry.isFile()) {
      if (entry.name.startsWith(UPLOAD_PREFIX) || !path.startsWith(prefix)) continue;
      if (after !== undefined && path <= after) continue;
      const stats = await lstat(at(dir, entry.name)).catch(() => undefined);
      if (stats?.isFile()) out.push({ path, stats });
      continue;
    }
    if (!mayHold(path, prefix)) continue;
    if (after !== undefined && path < after && !after.startsWith(path)) continue; // all of it is before `after`
    const sub = await open(at(dir, entry.name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch(() => undefined);
    if (!sub) continue;
    try {
      await walkPage(sub, { folder: path, query, out });
    } finally {
      await sub.close();
    }
  }
}

/** A page of volume `paths`'s files starting with `prefix`, after path `after`, in path order. */
export async function listVolumeFiles(
  paths: VolumePaths,
  query: { prefix: string; after: string | undefined; limit: number },
): Promise<{ files: ListedFile[]; more: boolean }> {
  const root = await open(paths.files, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  const found: Array<{ path: string; stats: Stats }> = [];
  try {
    // One more than the page: whether there is more.
    const wanted = query.limit + 1;
    await walkPage(root, { folder: "", query: { prefix: query.prefix, after: query.after, wanted }, out: found });
  } finally {
    await root.close();
  }
  const page = found.slice(0, query.limit);
  const files = await Promise.all(page.map(async ({ path, stats }) => {
    const sha256 = await recordedSha256(paths, path, stats);
    return { path, size: stats.size, modified: stats.mtime, ...(sha256 ? { sha256 } : {}) };
  }));
  return { files, more: found.length > query.limit };
}

/** The bytes of every regular file under `files` (links never followed): a `directory` volume's use. */
export async function filesBytes(files: string): Promise<number> {
  const root = await open(files, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  const found: Array<{ path: string; stats: Stats }> = [];
  try {
    await walk(root, "", "", found);
  } finally {
    await root.close();
  }
  return found.reduce((sum, f) => sum + f.stats.size, 0);
}

/**
 * Bytes used by a volume and bytes it can still take. `loop`: as its own file system reports them (its
 * metadata included: a fresh volume shows a little use, and holds a few percent less file data than its
 * size). `directory`: the sizes of its files (links not followed) against `sizeBytes`, since the folder's
 * file system is shared with every other volume and statfs would describe the whole disk.
 */
export async function volumeUsage(
  paths: VolumePaths,
  options: { mode: VolumesMode; sizeBytes: number },
): Promise<{ usedBytes: number; freeBytes: number }> {
  if (options.mode === "loop") {
    const stats = statfsSync(paths.root);
    return { usedBytes: (stats.blocks - stats.bfree) * stats.bsize, freeBytes: stats.bavail * stats.bsize };
  }
  const usedBytes = await filesBytes(paths.files);
  return { usedBytes, freeBytes: Math.max(0, options.sizeBytes - usedBytes) };
}
