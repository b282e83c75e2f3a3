/**
 * Bundles kept as files, on SQLite: `<data dir>/bundles/<sha256 hex>`, named by their content. SQLite
 * writes on the event loop, synchronously: 100 MiB of chunk rows per upload stalled every call of the
 * process whenever the disk was busy (the kernel holds back a writer that dirties pages faster than
 * they are flushed), and passed through the WAL and its checkpoint as well. A file costs nothing of the
 * sort: the spooled upload is linked into place, and read back through the thread pool. PostgreSQL keeps
 * bundles in its rows, where every host reads them.
 */
import { link, mkdir, open, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { randomBytesPooled } from "../random/mod.ts";
import { BUNDLE_CHUNK_BYTES, type BundleSource } from "./_bundle_source.ts";

/** Where the bundle of `digest` is kept in `dir`. */
export function bundleFile(dir: string, digest: string): string {
  return join(dir, digest.replace(/^sha256:/, ""));
}

/** Puts `bundle`'s bytes at its file in `dir`: a link to the spooled upload, else a copy; kept if present. */
export async function keepBundleFile(dir: string, bundle: BundleSource): Promise<void> {
  const target = bundleFile(dir, bundle.digest);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  if (await stat(target).then(() => true, () => false)) return;
  if (bundle.path) {
    try {
      return await link(bundle.path, target);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") return;
      // Another file system (EXDEV), or no links there: copied below.
    }
  }
  const partial = `${target}.${randomBytesPooled(6).toString("hex")}.partial`;
  const handle = await open(partial, "wx", 0o600);
  try {
    for await (const chunk of bundle.chunks()) await handle.write(chunk);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(partial, { force: true });
    throw error;
  }
  await handle.close();
  await rename(partial, target);
}

/** The kept file of `digest` in `dir`, read a chunk at a time into one buffer; undefined without one. */
export async function bundleFileSource(
  dir: string,
  digest: string,
): Promise<{ size: number; chunks: AsyncIterable<Uint8Array> } | undefined> {
  const path = bundleFile(dir, digest);
  const size = await stat(path).then((s) => s.size, () => undefined);
  if (size === undefined) return undefined;
  return { size, chunks: fileChunks(path) };
}

/** A file's bytes a chunk at a time, read into one buffer (each chunk is consumed before the next read). */
export async function* fileChunks(path: string): AsyncGenerator<Uint8Array> {
  const handle = await open(path, "r");
  try {
    const buffer = Buffer.allocUnsafe(BUNDLE_CHUNK_BYTES);
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, BUNDLE_CHUNK_BYTES, null);
      if (bytesRead === 0) return;
      yield buffer.subarray(0, bytesRead);
    }
  } finally {
    await handle.close();
  }
}
