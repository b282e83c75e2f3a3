/**
 * Unpacking a deploy bundle (the app folder as a gzip tarball) into a folder, safely: every entry's type,
 * path and size is checked before a byte of it is written, so a hostile bundle is refused without writing
 * anything outside the folder, and a gzip bomb is stopped as soon as it passes the unpacked-bytes limit.
 */
import { createHash } from "node:crypto";
import { mkdir, readdir, rm } from "node:fs/promises";
import { Transform, type Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { extract } from "tar-stream";
import { ProblemError } from "../problems/mod.ts";
import { refused, tooLarge } from "./_bundle_entry_checks.ts";
import { BundleWriter } from "./_bundle_writer.ts";

export { MAX_NAME_BYTES, MAX_PATH_BYTES } from "./_bundle_entry_checks.ts";

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

/** The bundle's content address: `sha256:<hex>`. */
export function bundleDigest(bundle: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bundle).digest("hex")}`;
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
  const writer = new BundleWriter(dir, { maxFiles, maxUnpackedBytes });
  const tar = extract();
  // The entry being written: a refusal waits for it to settle before removing `dir`.
  let current: Promise<void> = Promise.resolve();
  tar.on("entry", (header, stream, next) => {
    current = writer.unpack(header, stream).then(() => next(), (error: unknown) => {
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
    return { files: writer.files, bytes: writer.bytes };
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
