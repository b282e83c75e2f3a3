/** One `skopeo copy` from a registry into the store's OCI layout, and the manifest digest it wrote. */
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { isSha256Digest } from "./_oci_blobs.ts";
import { makeOwnedTemp, removeOwnedTemp } from "./_owned_temp.ts";
import { runTool } from "./_run_tool.ts";
import type { ImageReference } from "./image_reference.ts";

/** What one pull needs: where the tool is, where things go, and the operator's registry settings. */
export interface SkopeoPullOptions {
  skopeo: string;
  /** The store's OCI layout (skopeo makes it on the first pull). */
  layout: string;
  /** The store's folder for temporary files (big layers are spooled there, not in the system's /tmp). */
  tmp: string;
  /** The trust policy file the store writes (the host's /etc/containers/policy.json is not relied on). */
  policy: string;
  /** The reference's registry is reached over HTTP or without certificate checks. */
  insecure: boolean;
  /** A containers auth file; without one the pull is anonymous (no credential of the server's user is used). */
  authFile: string | null;
  timeoutMs: number;
  env: Record<string, string>;
}

/** The layout's tag of the last image pulled for `reference` (a hash: references may hold characters tags may not). */
export function referenceTag(reference: ImageReference): string {
  return `ref-${createHash("sha256").update(reference.canonical).digest("hex").slice(0, 40)}`;
}

/** The layout's tag of the image with manifest `digest`, by which it is unpacked. */
export function digestTag(digest: string): string {
  return digest.replace(":", "-");
}

/** skopeo refuses a reference with both a tag and a digest; the digest is what pins it. */
function source(reference: ImageReference): string {
  const suffix = reference.digest ? `@${reference.digest}` : `:${reference.tag}`;
  return `docker://${reference.registry}/${reference.repository}${suffix}`;
}

/** skopeo's argv for copying `reference` into the layout under its reference tag, writing its digest to `digestFile`. */
export function skopeoCopyArgs(reference: ImageReference, options: SkopeoPullOptions, digestFile: string): string[] {
  return [
    "--policy",
    options.policy,
    "--tmpdir",
    options.tmp,
    "copy",
    "--retry-times",
    "2",
    `--src-tls-verify=${!options.insecure}`,
    ...(options.authFile ? ["--src-authfile", options.authFile] : ["--src-no-creds"]),
    "--digestfile",
    digestFile,
    source(reference),
    `oci:${options.layout}:${referenceTag(reference)}`,
  ];
}

/** Copies `reference` into the layout and resolves to the manifest digest written there. */
export async function skopeoPull(reference: ImageReference, options: SkopeoPullOptions): Promise<string> {
  const scratch = await makeOwnedTemp(options.tmp, "pull");
  try {
    const digestFile = join(scratch, "digest");
    const args = skopeoCopyArgs(reference, options, digestFile);
    await runTool(options.skopeo, args, { timeoutMs: options.timeoutMs, env: options.env, subcommand: "copy" });
    const digest = (await readFile(digestFile, "utf8")).trim();
    if (!isSha256Digest(digest)) throw new Error(`skopeo wrote no sha256 digest for ${reference.canonical}`);
    return digest;
  } finally {
    await removeOwnedTemp(options.tmp, scratch);
  }
}
