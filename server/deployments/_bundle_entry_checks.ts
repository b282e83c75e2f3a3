/**
 * What an entry of a bundle may be, checked from its tar header before a byte of it is written: a plain
 * file or folder, at a path inside the bundle that every host's file system can hold; and the problems
 * that refuse a bundle.
 */
import { posix } from "node:path";
import type { Header as TarHeader } from "tar-stream";
import { ProblemError } from "../problems/mod.ts";

/** The longest file or folder name, in UTF-8 bytes: Linux's NAME_MAX (ext4, xfs, tmpfs, overlayfs). */
export const MAX_NAME_BYTES = 255;

/**
 * The longest path inside a bundle, in UTF-8 bytes. PATH_MAX is 4,096 bytes with the terminating NUL,
 * and a bundle is unpacked under the data dir (an upload's scratch folder, a deployment's folder on any
 * host): a fixed limit below it leaves them 1 KiB, so what one process accepts every host can unpack.
 */
export const MAX_PATH_BYTES = 3072;

/** A 400 problem (`validation`) refusing the bundle for `message`. */
export function refused(message: string): ProblemError {
  return new ProblemError("validation", `The bundle is refused: ${message}`, {
    errors: [{ path: "body", message }],
  });
}

/** A 413 problem (`content-too-large`) refusing the bundle for `message`. */
export function tooLarge(message: string): ProblemError {
  return new ProblemError("content-too-large", `The bundle is refused: ${message}`);
}

/** The entry's path inside the bundle, normalised (`""` for the root); throws for one that could leave it. */
export function safeRelativePath(name: string): string {
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

/** Refuses an entry that is not a plain file or folder (links of any kind, devices, fifos). */
export function checkType(header: TarHeader): void {
  if (header.type === "file" || header.type === "directory") return;
  if (header.type === "symlink" || header.type === "link") {
    const kind = header.type === "link" ? "hard link" : "symlink";
    throw refused(`${header.name}: links are not allowed in a bundle (a ${kind} to ${header.linkname})`);
  }
  throw refused(`${header.name}: a ${header.type} entry is not allowed; a bundle holds files and folders only`);
}
