/**
 * A repository folder as a deploy bundle: a gzip tarball whose root is the folder. Both providers end
 * here: local git's `git archive` output is gzipped as it arrives, GitHub's tarball (one top-level
 * `owner-repo-sha/` folder) is re-packed with only the folder's files, its prefix removed. Both stop as
 * soon as the bundle passes the size limit.
 */
import { posix } from "node:path";
import { Readable, Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip, createGzip } from "node:zlib";
import { extract, pack } from "tar-stream";
import { ProblemError } from "../problems/mod.ts";

/** A folder inside a repository, checked and normalised: `""` is the root. */
export function archivePath(path: string | undefined): string {
  const trimmed = (path ?? "").replace(/^\.?\/+/, "").replace(/\/+$/, "");
  if (trimmed === "" || trimmed === ".") return "";
  const normal = posix.normalize(trimmed);
  if (trimmed.includes("\0") || trimmed.startsWith("/") || normal.split("/").includes("..")) {
    throw new ProblemError("validation", `path ${JSON.stringify(path)} must be a folder inside the repository`, {
      errors: [{ path: "body.source.path", message: "must be a relative path without '..'" }],
    });
  }
  return normal;
}

function tooLarge(maxBytes: number): ProblemError {
  return new ProblemError(
    "content-too-large",
    `The repository folder packs to more than the bundle limit of ${maxBytes} bytes (RUNPLANE_BUNDLE_LIMIT)`,
  );
}

/** Collects `source` gzipped, failing with a 413 problem once the gzip passes `maxBytes`. */
export async function gzipLimited(source: Readable, maxBytes: number): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  let size = 0;
  const collect = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      size += chunk.length;
      if (size > maxBytes) return done(tooLarge(maxBytes));
      chunks.push(chunk);
      done();
    },
  });
  await pipeline(source, createGzip(), collect);
  return new Uint8Array(Buffer.concat(chunks));
}

/**
 * Re-packs a gzip tarball with one top-level folder (GitHub's) as a bundle of `path` inside it: files
 * and folders only (links are left out, as a bundle may not hold them). Throws a 404 problem when
 * nothing is under `path`.
 */
export async function repackSubfolder(
  tarball: Readable,
  options: { path: string; maxBytes: number; what: string },
): Promise<Uint8Array> {
  const out = pack();
  const bundle = gzipLimited(Readable.from(out), options.maxBytes);
  let found = false;
  const reader = extract();
  // Past the limit, stop reading the download too.
  bundle.catch((error) => reader.destroy(error));
  reader.on("entry", (header, stream, next) => {
    const [, ...rest] = header.name.split("/");
    const inner = rest.join("/").replace(/\/+$/, "");
    const prefix = options.path ? `${options.path}/` : "";
    const keep = (header.type === "file" || header.type === "directory")
      && (inner === options.path || inner.startsWith(prefix));
    if (!keep) return stream.resume().on("end", next);
    found = true;
    const name = inner.slice(prefix.length);
    if (name === "" || inner === options.path) return stream.resume().on("end", next);
    const entry = { name, type: header.type, size: header.size, mode: header.mode, mtime: new Date(0) };
    stream.pipe(out.entry(entry, next));
  });
  try {
    await pipeline(tarball, createGunzip(), reader);
  } catch (error) {
    out.destroy();
    await bundle.catch(() => {});
    if (error instanceof ProblemError) throw error;
    throw new ProblemError(
      "bad-gateway",
      `${options.what} could not be read as a gzip tarball: ${(error as Error).message}`,
    );
  }
  out.finalize();
  const bytes = await bundle;
  if (!found) throw new ProblemError("not-found", `${options.what} has no folder ${options.path}`);
  return bytes;
}
