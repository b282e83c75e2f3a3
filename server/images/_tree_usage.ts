/**
 * What the image cache knows of a finished tree (an unpacked root, a system layer): when it was last used,
 * kept by the server in a `<tree>.used` stamp beside it (its modification time; the tree itself is
 * read-only and its own times say nothing of use), and how much disk it takes, counted by `du` in blocks,
 * never following a link and never leaving the tree's file system.
 */
import { execFile } from "node:child_process";
import { lstat, writeFile } from "node:fs/promises";
import { isAbsolute } from "node:path";

/** The stamp of `tree`: a file beside it (never in it: the tree is shared read-only). */
export function usedStamp(tree: string): string {
  if (!isAbsolute(tree) || tree.endsWith("/")) throw new Error(`Not a tree of the image cache: ${tree}`);
  return `${tree}.used`;
}

/** Says `tree` was used now (its stamp is written). */
export async function touchUsed(tree: string): Promise<void> {
  await writeFile(usedStamp(tree), "");
}

/**
 * When `tree` was last used (ms since the epoch): its stamp's time, or the tree's own when it has none (a
 * tree made before stamps were written), or 0 when neither is there.
 */
export async function lastUsedMs(tree: string): Promise<number> {
  for (const path of [usedStamp(tree), tree]) {
    try {
      return (await lstat(path)).mtimeMs;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  }
  return 0;
}

/** The disk `tree` takes in bytes (`du -skx`: blocks in use, links not followed, one file system). */
export function treeBytes(tree: string): Promise<number> {
  if (!isAbsolute(tree)) return Promise.reject(new Error(`Not an absolute path: ${tree}`));
  return new Promise((resolve, reject) => {
    execFile("du", ["-skx", "--", tree], { timeout: 10 * 60_000, maxBuffer: 1 << 20 }, (error, out) => {
      const kilobytes = Number.parseInt(String(out).split("\t")[0] ?? "", 10);
      if (error || !Number.isFinite(kilobytes)) reject(new Error(`du ${tree} failed: ${error?.message ?? out}`));
      else resolve(kilobytes * 1024);
    });
  });
}
