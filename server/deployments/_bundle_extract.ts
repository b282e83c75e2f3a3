/**
 * Unpacking a deploy bundle (the app folder as a gzip tarball) into a folder, safely: every entry's type,
 * path and size is checked before a byte of it is written, so a hostile bundle is refused without writing
 * anything outside the folder, and a gzip bomb is stopped as soon as it passes the unpacked-bytes limit.
 */
import { createHash } from "node:crypto";
import { mkdir, open, readdir, rm } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { Transform, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { extract, type ExtractEvents, type Header as TarHeader } from "tar-stream";
import { ProblemError } from "../problems/mod.ts";

/** How much one bundle may unpack to. */
export interface BundleLimits {
  /** Entries (files and folders). */
  maxFiles: number;
  /** Bytes of all files together, once unpacked. */
  maxUnpackedBytes: number;
}

/** 20,000 entries and 1 GiB unpacked: far above any app folder, far below what fills a disk. */
export const DEFAULT_BUNDLE_LIMITS: BundleLimits = { maxFiles: 20_000, maxUnpackedBytes: 1024 ** 3 };

/**
 * What the tar stream may hold beyond the files' bytes: per entry a header, a pax or long-name header with
 * its data, and padding; plus the end blocks and the record padding tar tools add (10 KiB with GNU tar).
 */
const OVERHEAD_PER_ENTRY = 2048;
const OVERHEAD_FIXED = 64 * 1024;

/** The longest file or folder name, in UTF-8 bytes: Linux's NAME_MAX (ext4, xfs, tmpfs, overlayfs). */
export const MAX_NAME_BYTES = 255;

/**
 * The longest path inside a bundle, in UTF-8 bytes. PATH_MAX is 4,096 bytes with the terminating NUL,
 * and a bundle is unpacked under the data dir (an upload's scratch folder, a deployment's folder on any
 * host): a fixed limit below it leaves them 1 KiB, so what one process accepts every host can unpack.
 */
export const MAX_PATH_BYTES = 3072;

/** The bundle's content address: `sha256:<hex>`. */
export function bundleDigest(bundle: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bundle).digest("hex")}`;
}

function refused(message: string): ProblemError {
  return new ProblemError("validation", `The bundle is refused: ${message}`, {
    errors: [{ path: "body", message }],
  });
}

function tooLarge(message: string): ProblemError {
  return new ProblemError("content-too-large", `The bundle is refused: ${message}`);
}

/** The entry's path inside the bundle, normalised (`""` for the root); throws for one that could leave it. */
function safeRelativePath(name: string): string {
  if (name.includes("\0")) throw refused(`${JSON.stringify(name)}: a path may not contain NUL`);
  const raw = name.replace(/^(\.\/+)+/, "");
  if (raw.startsWith("/") || raw.startsWith("\\") || /^[A-Za-z]:/.test(raw)) {
    throw refused(`${name}: absolute paths are not allowed`);
  }
  if (raw.split(/[\\/]/).includes("..")) throw refused(`${name}: paths with '..' are not allowed`);
  const normal = posix.normalize(raw === "" ? "." : raw).replace(/\/+$/, "");
  if (normal === "." || normal === "") return "";
  // Unreachable after the checks above; kept so that a future change to them cannot open an escape.
  if (normal.startsWith("../") || normal === ".." || posix.isAbsolute(normal)) {
    throw refused(`${name}: the path leaves the bundle`);
  }
  checkLength(name, normal);
  return normal;
}

/** Refuses a path the file system could not hold: the server's fault (ENAMETOOLONG, a 500) otherwise. */
function checkLength(name: string, path: string): void {
  const long = path.split("/").find((segment) => Buffer.byteLength(segment) > MAX_NAME_BYTES);
  if (long !== undefined) {
    throw refused(
      `${name}: a file or folder name is at most ${MAX_NAME_BYTES} bytes (UTF-8), and ${long} has ${
        Buffer.byteLength(long)
      }`,
    );
  }
  const bytes = Buffer.byteLength(path);
  if (bytes > MAX_PATH_BYTES) {
    throw refused(
      `${name}: a path in the bundle is at most ${MAX_PATH_BYTES} bytes (UTF-8), and this one has ${bytes}`,
    );
  }
}

function checkType(header: TarHeader): void {
  if (header.type === "file" || header.type === "directory") return;
  if (header.type === "symlink" || header.type === "link") {
    const kind = header.type === "link" ? "hard link" : "symlink";
    throw refused(`${header.name}: links are not allowed in a bundle (a ${kind} to ${header.linkname})`);
  }
  throw refused(`${header.name}: a ${header.type} entry is not allowed; a bundle holds files and folders only`);
}

/** Whether `error` came from the file system (the server's fault), not from the bundle's bytes. */
function isSystemError(error: unknown): boolean {
  return error instanceof Error && typeof (error as NodeJS.ErrnoException).syscall === "string";
}

async function* oneChunk(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  yield bytes;
}

/**
 * Writes each chunk of `chunks` into `gunzip` once the one before was consumed, then ends it. Its write
 * callback comes only once zlib has read the whole chunk, so a source may hand the same buffer again
 * (a file read into one buffer): no fresh buffer per read for the collector to find later.
 */
async function feed(chunks: AsyncIterator<Uint8Array>, gunzip: Writable): Promise<void> {
  for (;;) {
    const next = await chunks.next();
    if (next.done) break;
    await new Promise<void>((resolve, reject) => {
      gunzip.write(next.value, (error) => (error ? reject(error) : resolve()));
    });
  }
  gunzip.end();
}

/**
 * Unpacks `bundle` (its bytes, or a stream of them: a file, the store's chunks) into `dir` (made; it must
 * not exist or be empty). Throws a 400 problem (`validation`)
 * for an entry that is not a plain file or folder inside the bundle (links of any kind, devices, fifos,
 * absolute or `..` paths, a path held twice or as both file and folder, a name over `MAX_NAME_BYTES` or
 * a path over `MAX_PATH_BYTES`, or one the file system finds too long) or for bytes that are not a gzip
 * tarball, and a 413 problem (`content-too-large`) past `limits` (`DEFAULT_BUNDLE_LIMITS` fills in the
 * rest). Files are written with mode 0o755 when any executable bit is set, else 0o644. On any failure
 * `dir` is removed, and nothing is ever written outside it.
 */
export async function extractBundle(
  bundle: Uint8Array | AsyncIterable<Uint8Array>,
  dir: string,
  limits: Partial<BundleLimits> = {},
): Promise<{ files: number; bytes: number }> {
  const { maxFiles, maxUnpackedBytes } = { ...DEFAULT_BUNDLE_LIMITS, ...limits };
  await mkdir(dir, { recursive: true });
  if ((await readdir(dir)).length > 0) throw new Error(`extractBundle: ${dir} is not empty`);
  // Every path the bundle made so far, with what it is: a file never becomes a folder, nor the reverse.
  const kinds = new Map<string, "file" | "directory">([["", "directory"]]);
  // Folders made on disk so far: each is made once, not once per file in it.
  const made = new Set<string>([dir]);
  let entries = 0;
  let files = 0;
  let bytes = 0;

  function claim(header: TarHeader, path: string): void {
    const kind = header.type === "directory" ? "directory" : "file";
    const segments = path.split("/");
    for (let i = 1; i < segments.length; i++) {
      const parent = segments.slice(0, i).join("/");
      if (kinds.get(parent) === "file") throw refused(`${header.name}: its folder ${parent} is a file in the bundle`);
      kinds.set(parent, "directory");
    }
    const before = kinds.get(path);
    if (before === "file" && kind === "file") throw refused(`${header.name}: the bundle holds this file twice`);
    if (before !== undefined && before !== kind) {
      throw refused(`${header.name}: the bundle holds this path both as a file and as a folder`);
    }
    kinds.set(path, kind);
  }

  async function makeFolder(path: string): Promise<void> {
    if (made.has(path)) return;
    await mkdir(path, { recursive: true });
    made.add(path);
  }

  async function unpack(header: TarHeader, stream: ExtractEvents["entry"][1]): Promise<void> {
    checkType(header);
    const path = safeRelativePath(header.name);
    if (++entries > maxFiles) throw tooLarge(`${header.name}: the bundle has more than ${maxFiles} entries`);
    const size = header.type === "file" ? header.size ?? 0 : 0;
    // The header says how many bytes follow, and tar holds no more: refusing here stops a bomb before
    // a byte of it is unpacked.
    if (bytes + size > maxUnpackedBytes) {
      throw tooLarge(`${header.name}: the bundle unpacks to more than ${maxUnpackedBytes} bytes`);
    }
    if (path === "" && header.type === "directory") return void stream.resume();
    if (path === "") throw refused(`${header.name}: a file needs a name`);
    claim(header, path);
    const target = join(dir, path);
    if (header.type === "directory") {
      await makeFolder(target).catch((error: NodeJS.ErrnoException) => {
        if (error.code === "ENAMETOOLONG") throw refused(`${header.name}: the name is too long to unpack`);
        throw error;
      });
      return void stream.resume();
    }
    const mode = (header.mode ?? 0o644) & 0o111 ? 0o755 : 0o644;
    // Links are refused, so no folder inside `dir` is one and `mkdir` follows nothing out of it; "wx" never
    // opens an existing path, so nothing the bundle made earlier can redirect a write.
    const file = await makeFolder(dirname(target)).then(() => open(target, "wx", mode)).catch(
      (error: NodeJS.ErrnoException) => {
        // Two names for one path, e.g. on a case-insensitive file system.
        if (error.code === "EEXIST" || error.code === "ENOTDIR" || error.code === "EISDIR") {
          throw refused(`${header.name}: another entry of the bundle already uses this path`);
        }
        // Within the limits above, yet too long here (a file system with shorter names, say).
        if (error.code === "ENAMETOOLONG") throw refused(`${header.name}: the name is too long to unpack`);
        throw error;
      },
    );
    try {
      await file.chmod(mode); // exact, whatever the process's umask
    } catch (error) {
      await file.close();
      throw error;
    }
    if (size === 0) {
      await file.close();
      stream.resume();
    } else {
      await pipeline(stream, file.createWriteStream());
    }
    bytes += size;
    files++;
  }

  const tar = extract();
  // The entry being written: a refusal waits for it to settle before removing `dir`.
  let current: Promise<void> = Promise.resolve();
  tar.on("entry", (header, stream, next) => {
    current = unpack(header, stream).then(() => next(), (error: unknown) => {
      // The refusal travels through the extractor; the entry's stream goes down with it.
      stream.on("error", () => {});
      tar.destroy(error as Error);
    });
  });
  // The gunzipped stream is bounded too: a bomb can pad past its entries, where no header counts it.
  const streamLimit = maxUnpackedBytes + (maxFiles + 2) * OVERHEAD_PER_ENTRY + OVERHEAD_FIXED;
  let gunzipped = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      gunzipped += chunk.length;
      if (gunzipped > streamLimit) done(tooLarge(`the bundle unpacks to more than ${maxUnpackedBytes} bytes`));
      else done(null, chunk);
    },
  });
  const gunzip = createGunzip();
  const chunks = (bundle instanceof Uint8Array ? oneChunk(bundle) : bundle)[Symbol.asyncIterator]();
  const unpacked = pipeline(gunzip, counter, tar);
  try {
    // Whichever fails first ends the unpacking; a refusal stops the feeding (and closes its source).
    await Promise.race([feed(chunks, gunzip).then(() => unpacked), unpacked]);
    return { files, bytes };
  } catch (error) {
    await chunks.return?.();
    await unpacked.catch(() => {});
    await current;
    await rm(dir, { recursive: true, force: true });
    if (error instanceof ProblemError) throw error;
    if (isSystemError(error)) throw error;
    const reason = (error as NodeJS.ErrnoException).code?.startsWith("Z_")
      ? "it is not a gzip tarball (application/gzip: the app folder, e.g. tar czf - -C app .)"
      : `it is not a readable tarball (${(error as Error).message})`;
    throw refused(reason);
  }
}
