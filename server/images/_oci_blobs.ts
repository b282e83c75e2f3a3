/**
 * Plain reads of an OCI image layout's blobs (manifests and configs are JSON files named by their digest):
 * each read opens the file without following a link, in a blobs folder that is no link either, and checks
 * the content against its digest, so a blob changed or swapped on disk is never believed.
 */
import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { open, realpath } from "node:fs/promises";
import { join } from "node:path";

const SHA256_DIGEST = /^sha256:([a-f0-9]{64})$/;
/** Manifests and configs are small; a bigger "blob" read as JSON is refused rather than loaded. */
const MAX_JSON_BLOB_BYTES = 4 * 1024 * 1024;

/** Whether `digest` is `sha256:` and 64 lowercase hex digits (the only kind the store keeps). */
export function isSha256Digest(digest: string): boolean {
  return SHA256_DIGEST.test(digest);
}

/** The hex part of a sha256 digest; throws when `digest` is not one. */
export function digestHex(digest: string): string {
  const match = SHA256_DIGEST.exec(digest);
  if (!match) throw new Error(`${JSON.stringify(digest)} is not an image digest: write sha256: and 64 hex digits`);
  return match[1]!;
}

/** The blobs folder of `layout`, refused when it (or anything on its path below `layout`) is a link. */
async function blobsFolder(layout: string): Promise<string> {
  const expected = join(await realpath(layout), "blobs", "sha256");
  const actual = await realpath(join(layout, "blobs", "sha256"));
  if (actual !== expected) {
    throw new Error(`The image store's blobs folder ${expected} is a link; the store refuses it`);
  }
  return actual;
}

/** Reads the blob `digest` of the OCI layout `layout` as JSON, checked against its digest. */
export async function readJsonBlob(layout: string, digest: string): Promise<unknown> {
  const path = join(await blobsFolder(layout), digestHex(digest));
  let file;
  try {
    file = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      throw new Error(`The image store has no blob ${digest}: pull the image first`);
    }
    throw error;
  }
  try {
    const info = await file.stat();
    if (!info.isFile()) throw new Error(`The image store's blob ${digest} is not a file`);
    if (info.size > MAX_JSON_BLOB_BYTES) throw new Error(`The image store's blob ${digest} is too big to be JSON`);
    const bytes = await file.readFile();
    if (`sha256:${createHash("sha256").update(bytes).digest("hex")}` !== digest) {
      throw new Error(`The image store's blob ${digest} does not match its digest; pull the image again`);
    }
    return JSON.parse(bytes.toString("utf8"));
  } finally {
    await file.close();
  }
}
