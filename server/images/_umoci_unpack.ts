/**
 * Root file systems unpacked from the store's layout, one folder per image digest: unpacked by
 * `umoci raw unpack --rootless` into a temporary folder beside it and renamed, so a root that a crash left
 * half-made is never taken for a finished one.
 */
import { lstat, rename } from "node:fs/promises";
import { join } from "node:path";
import { digestHex } from "./_oci_blobs.ts";
import { makeOwnedTemp, removeOwnedTemp } from "./_owned_temp.ts";
import { runTool } from "./_run_tool.ts";
import { digestTag } from "./_skopeo_pull.ts";

/** What one unpack needs. */
export interface UmociUnpackOptions {
  umoci: string;
  layout: string;
  /** The folder of finished roots (and of the temporary ones beside them). */
  roots: string;
  timeoutMs: number;
  env: Record<string, string>;
}

/** The root folder of the image `digest` in `roots`. */
export function rootPath(roots: string, digest: string): string {
  return join(roots, `sha256-${digestHex(digest)}`);
}

/** Whether the root of `digest` is finished (a real folder, not a link). */
export async function rootExists(roots: string, digest: string): Promise<boolean> {
  try {
    return (await lstat(rootPath(roots, digest))).isDirectory();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw error;
  }
}

/** Unpacks the image `digest` (tagged in the layout by its digest) and resolves to its finished root. */
export async function umociUnpack(digest: string, options: UmociUnpackOptions): Promise<string> {
  const final = rootPath(options.roots, digest);
  const temp = await makeOwnedTemp(options.roots, digestHex(digest).slice(0, 12));
  try {
    const args = ["raw", "unpack", "--rootless", "--image", `${options.layout}:${digestTag(digest)}`, temp];
    await runTool(options.umoci, args, { timeoutMs: options.timeoutMs, env: options.env, subcommand: "raw unpack" });
    try {
      await rename(temp, final);
    } catch (error) {
      // Another process finished the same root first: its root is as good as ours.
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== "ENOTEMPTY" && code !== "EEXIST") || !await rootExists(options.roots, digest)) throw error;
    }
    return final;
  } finally {
    await removeOwnedTemp(options.roots, temp);
  }
}
