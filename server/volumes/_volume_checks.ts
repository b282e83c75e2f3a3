/** What a volume's name, size and file paths may be (`VOLUME_LIMITS`: re-exported by mod.ts). */
import { posix } from "node:path";
import { ProblemError } from "../problems/mod.ts";

const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

/** The limits of a project's volumes. */
export const VOLUME_LIMITS = {
  /** The smallest volume, in GiB (64 MiB: an ext4 image smaller holds little but its own metadata). */
  minSizeGb: 0.0625,
  /** The largest volume, in GiB (1 TiB). */
  maxSizeGb: 1024,
  /** Volumes per project: 409 for one more. */
  volumes: 32,
  /** A file or folder name inside a volume, in UTF-8 bytes (Linux's NAME_MAX). */
  nameBytes: 255,
  /** A file's path inside a volume, in UTF-8 bytes (as a bundle's paths: PATH_MAX less room for the volumes dir). */
  pathBytes: 3072,
} as const;

/** The prefix of an upload's temporary name: never listed, and refused as a path's last name. */
export const UPLOAD_PREFIX = ".rp-upload-";

const NAME = /^[a-z][a-z0-9_-]{0,62}$/;

/** Throws the 400 problem for a name that cannot name a volume's folder. */
export function checkVolumeName(name: string): void {
  if (!NAME.test(name)) {
    const message = "must be 1 to 63 lowercase letters, digits, '-' or '_', starting with a letter";
    throw new ProblemError("validation", `The volume name ${JSON.stringify(name)} ${message}`, {
      errors: [{ path: "path.name", message }],
    });
  }
}

/** A size in GiB as bytes: rounded up to a whole MiB; throws a 400 outside the limits. */
export function sizeBytesOf(sizeGb: number): number {
  if (
    typeof sizeGb !== "number" || !Number.isFinite(sizeGb) || sizeGb < VOLUME_LIMITS.minSizeGb
    || sizeGb > VOLUME_LIMITS.maxSizeGb
  ) {
    const message = `must be a number of GiB from ${VOLUME_LIMITS.minSizeGb} to ${VOLUME_LIMITS.maxSizeGb}`;
    throw new ProblemError("validation", `size_gb ${message}`, { errors: [{ path: "body.size_gb", message }] });
  }
  return Math.ceil((sizeGb * GIB) / MIB) * MIB;
}

function refusedPath(path: string, message: string): ProblemError {
  return new ProblemError("validation", `The path ${JSON.stringify(path)} is refused: ${message}`, {
    errors: [{ path: "path.path", message }],
  });
}

/**
 * A file's path inside a volume as its names (`a/b/c.bin` → `["a", "b", "c.bin"]`), checked as a bundle's
 * paths are: not empty, no NUL, not absolute, no `..` or `.`, no empty name, each name at most 255 bytes
 * and the whole at most 3,072. `allowEmpty`: the volume's root (`[]`) is allowed (a listing's folder).
 */
export function volumePathNames(path: string, options: { allowEmpty?: boolean } = {}): string[] {
  if (path.includes("\0")) throw refusedPath(path, "a path may not contain NUL");
  if (path.startsWith("/") || path.includes("\\")) {
    throw refusedPath(path, "absolute paths and backslashes are not allowed");
  }
  const trimmed = path.replace(/\/+$/, "");
  if (trimmed === "") {
    if (options.allowEmpty) return [];
    throw refusedPath(path, "name a file inside the volume");
  }
  const names = trimmed.split("/");
  if (names.some((name) => name === ".." || name === "." || name === "")) {
    throw refusedPath(path, "'..', '.' and empty names are not allowed");
  }
  const long = names.find((name) => Buffer.byteLength(name) > VOLUME_LIMITS.nameBytes);
  if (long !== undefined) throw refusedPath(path, `a name is at most ${VOLUME_LIMITS.nameBytes} bytes (UTF-8)`);
  if (Buffer.byteLength(trimmed) > VOLUME_LIMITS.pathBytes) {
    throw refusedPath(path, `a path is at most ${VOLUME_LIMITS.pathBytes} bytes (UTF-8)`);
  }
  // Unreachable after the checks above; kept so a change to them cannot open an escape.
  if (posix.normalize(trimmed) !== trimmed) throw refusedPath(path, "the path is not in its normal form");
  return names;
}

/** A file's path as the API takes it: percent-decoded from the URL (a malformed escape is a 400). */
export function decodeVolumePath(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw refusedPath(raw, "malformed percent-encoding");
  }
}

/** Refuses a path whose last name is an upload's temporary one. */
export function checkNotUpload(path: string, names: string[]): void {
  if (names.at(-1)!.startsWith(UPLOAD_PREFIX)) {
    throw refusedPath(path, `names starting ${UPLOAD_PREFIX} are the server's unfinished uploads`);
  }
}
