/**
 * Unpacking a deploy bundle (the app folder as a gzip tarball) into a folder, safely: every entry's type,
 * path and size is checked before a byte of it is written, so a hostile bundle is refused without writing
 * anything outside the folder, and a gzip bomb is stopped as soon as it passes the unpacked-bytes limit.
 */
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, readdir, rm } from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { extract, type Header as TarHeader } from "tar-stream";
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

/** The entry's path inside the bundle, normalised; throws for a path that could leave the folder. */
function safeRelativePath(name: string): string {
  const raw = name.replace(/^\.\/+/, "");
  if (raw === "" || raw === ".") return "";
  if (raw.startsWith("/") || /^[A-Za-z]:/.test(raw)) throw refused(`${name}: absolute paths are not allowed`);
  if (raw.includes("\0")) throw refused(`${JSON.stringify(name)}: a path may not contain NUL`);
  if (raw.split(/[\\/]/).includes("..")) throw refused(`${name}: paths with '..' are not allowed`);
  const normal = posix.normalize(raw).replace(/\/+$/, "");
  if (normal.startsWith("..") || posix.isAbsolute(normal)) throw refused(`${name}: the path leaves the bundle`);
  return normal;
}

function checkType(header: TarHeader): void {
  if (header.type === "file" || header.type === "directory") return;
  if (header.type === "symlink" || header.type === "link") {
    throw refused(`${header.name}: links are not allowed in a bundle (${header.type} to ${header.linkname})`);
  }
  throw refused(`${header.name}: a ${header.type} entry is not allowed; a bundle holds files and folders only`);
}

/**
 * Unpacks `bundle` into `dir` (made; it must not exist or be empty). Throws a 400 problem for an entry
 * that is not a plain file or folder inside the bundle (links of any kind, devices, absolute or `..`
 * paths, duplicates) or for bytes that are not a gzip tarball, and a 413 problem past `limits`; on any
 * failure `dir` is removed.
 */
export async function extractBundle(
  bundle: Uint8Array,
  dir: string,
  limits: Partial<BundleLimits> = {},
): Promise<{ files: number; bytes: number }> {
  const { maxFiles, maxUnpackedBytes } = { ...DEFAULT_BUNDLE_LIMITS, ...limits };
  await mkdir(dir, { recursive: true });
  if ((await readdir(dir)).length > 0) throw new Error(`extractBundle: ${dir} is not empty`);
  const seen = new Set<string>();
  let entries = 0;
  let files = 0;
  let bytes = 0;
  const tar = extract();
  tar.on("entry", (header, stream, next) => {
    void (async () => {
      checkType(header);
      const path = safeRelativePath(header.name);
      if (++entries > maxFiles) throw tooLarge(`it has more than ${maxFiles} entries`);
      if (bytes + (header.size ?? 0) > maxUnpackedBytes) {
        throw tooLarge(`it unpacks to more than ${maxUnpackedBytes} bytes (at ${header.name})`);
      }
      if (path === "") return stream.resume();
      const target = join(dir, path);
      if (header.type === "directory") {
        await mkdir(target, { recursive: true });
        return stream.resume();
      }
      if (seen.has(path)) throw refused(`${header.name}: the bundle holds this file twice`);
      seen.add(path);
      await mkdir(dirname(target), { recursive: true });
      const mode = (header.mode ?? 0o644) & 0o111 ? 0o755 : 0o644;
      // "wx": never open an existing path, so nothing the bundle made earlier can redirect a write.
      await pipeline(stream, createWriteStream(target, { flags: "wx", mode }));
      bytes += header.size ?? 0;
      files++;
    })().then(() => next(), (error) => {
      // The refusal travels through the extractor; the entry's stream goes down with it.
      stream.on("error", () => {});
      tar.destroy(error);
    });
  });
  // The gunzipped stream is bounded too: a bomb can pad past its entries, where no header counts it.
  const streamLimit = maxUnpackedBytes + (maxFiles + 2) * 1024;
  let gunzipped = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      gunzipped += chunk.length;
      if (gunzipped > streamLimit) done(tooLarge(`it unpacks to more than ${maxUnpackedBytes} bytes`));
      else done(null, chunk);
    },
  });
  try {
    await pipeline(Readable.from([bundle]), createGunzip(), counter, tar);
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    if (error instanceof ProblemError) throw error;
    const reason = (error as NodeJS.ErrnoException).code?.startsWith("Z_")
      ? "it is not a gzip tarball (application/gzip: the app folder, e.g. tar czf - -C app .)"
      : `it is not a readable tarball (${(error as Error).message})`;
    throw refused(reason);
  }
  return { files, bytes };
}
