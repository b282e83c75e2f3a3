/**
 * Taking an unpacked root out of the store (the image cache's eviction): the root renamed into a
 * temporary folder of the store's own making and removed there (so the only path ever removed is one the
 * store made from a digest under its own folder), its stamp removed, the image's tags removed from the OCI
 * layout and the layout's unreferenced blobs collected by `umoci gc`.
 */
import { lstat, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { digestHex } from "./_oci_blobs.ts";
import { makeOwnedTemp, removeOwnedTemp } from "./_owned_temp.ts";
import { runTool } from "./_run_tool.ts";
import { rootPath } from "./_umoci_unpack.ts";
import { lastUsedMs, usedStamp } from "./_tree_usage.ts";

/** What removing a root needs. */
export interface RootEvictionOptions {
  umoci: string;
  layout: string;
  roots: string;
  env: Record<string, string>;
}

/** A finished root of the store. */
export interface StoredRoot {
  /** `sha256:<hex>`: the image's manifest digest. */
  digest: string;
  /** Its folder (`<store>/roots/sha256-<hex>`). */
  path: string;
  /** When it was last used (ms since the epoch; see `_tree_usage.ts`). */
  lastUsedMs: number;
}

const ROOT_NAME = /^sha256-([0-9a-f]{64})$/;

/** The finished roots in `roots` (folders named by a digest; temporary ones and stamps are not roots). */
export async function listRoots(roots: string): Promise<StoredRoot[]> {
  const names = await readdir(roots).catch((error) => {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [] as string[];
    throw error;
  });
  const found: StoredRoot[] = [];
  for (const name of names) {
    const hex = ROOT_NAME.exec(name)?.[1];
    if (!hex) continue;
    const path = join(roots, name);
    if (!(await lstat(path)).isDirectory()) continue;
    found.push({ digest: `sha256:${hex}`, path, lastUsedMs: await lastUsedMs(path) });
  }
  return found;
}

/** The layout's tags (`org.opencontainers.image.ref.name`) that name the manifest `digest`; undefined without a layout. */
async function tagsOf(layout: string, digest: string): Promise<string[] | undefined> {
  let index: { manifests?: { digest?: string; annotations?: Record<string, string> }[] };
  try {
    index = JSON.parse(await readFile(join(layout, "index.json"), "utf8"));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
  const tags = (index.manifests ?? []).filter((entry) => entry.digest === digest)
    .map((entry) => entry.annotations?.["org.opencontainers.image.ref.name"])
    .filter((tag): tag is string => typeof tag === "string" && /^[A-Za-z0-9_.-]+$/.test(tag));
  return [...new Set(tags)];
}

/**
 * Removes the root of `digest` (when there is one) and its stamp, untags the image in the layout and
 * collects the layout's garbage. The caller holds the store's queue: no pull or unpack runs meanwhile.
 */
export async function evictRoot(digest: string, options: RootEvictionOptions): Promise<void> {
  const root = rootPath(options.roots, digest);
  const present = await lstat(root).then((stat) => stat.isDirectory(), () => false);
  if (present) {
    // Renamed onto an empty folder the store made (a rename replaces an empty folder), then removed there.
    const doomed = await makeOwnedTemp(options.roots, `evict-${digestHex(digest).slice(0, 12)}`);
    try {
      await rename(root, doomed);
    } finally {
      await removeOwnedTemp(options.roots, doomed);
    }
  }
  await rm(usedStamp(root), { force: true });
  const { env } = options;
  const tags = await tagsOf(options.layout, digest);
  if (tags === undefined) return; // no layout: nothing was ever pulled into it
  for (const tag of tags) {
    await runTool(options.umoci, ["rm", "--image", `${options.layout}:${tag}`], {
      timeoutMs: 60_000,
      env,
      subcommand: "rm",
    });
  }
  await runTool(options.umoci, ["gc", "--layout", options.layout], { timeoutMs: 10 * 60_000, env, subcommand: "gc" });
}
