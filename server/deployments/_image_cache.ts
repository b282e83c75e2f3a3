/**
 * The bounded image cache of this host (`RUNPLANE_IMAGE_CACHE_GB`): unpacked image roots (the image
 * store's) and system layers (`<data>/image-layers/<hex>/`) are kept until they take more than the bound,
 * then the least recently used are removed first, never one a deployment served here runs in, nor one used
 * within `minAgeMs` (a build may be using it: builds take no lease on a root they read). A pass runs at
 * start and after each build; each tree's last use is its `.used` stamp (written when it is pulled,
 * unpacked or taken by a build, and at every pass for those in service), its size counted once by `du`
 * (finished trees never change).
 *
 * A root is removed by the image store (in its queue, the image untagged and its blobs collected); a layer
 * under the lock its builders take (`<hex>.lock`), skipped while one holds it. A deployment built here on
 * what was removed and no longer served has its built marker removed, so it is built again (pulled and
 * unpacked anew) should it be served once more.
 */
import { lstat, mkdir, readdir, readFile, rename, rm, rmdir } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import { type ImageStore, lastUsedMs, touchUsed, treeBytes } from "../images/mod.ts";
import type { Logger } from "../log.ts";
import { forgetImageRoot } from "../sandbox/mod.ts";
import { systemLayersDir } from "./_system_layer.ts";

/** Options of {@link startImageCache}. */
export interface ImageCacheOptions {
  images: ImageStore;
  dataDir: string;
  /** The most bytes roots and layers together may take; 0: unbounded (nothing is removed). */
  boundBytes: number;
  /** A root or layer used within this long is kept, whatever the bound. */
  minAgeMs: number;
  logger: Logger;
  /** The roots (image roots or system layers) the deployments served here run in now. */
  inUse(): string[];
}

/** The cache's passes. */
export interface ImageCache {
  /** Runs a pass (or one more after the one running); resolves once it ended. Never rejects (logged). */
  prune(): Promise<void>;
  /** Resolves once no pass runs or waits to run (a stopping server awaits it). */
  idle(): Promise<void>;
}

/** A root or a layer. */
interface CachedTree {
  kind: "root" | "layer";
  path: string;
  /** The image digest of a root; the input digest of a layer. */
  digest: string;
  lastUsedMs: number;
}

const LAYER_NAME = /^[0-9a-f]{64}$/;

/** The ready system layers in `layersDir` (a folder named by its digest with its `.ready` beside it). */
async function listLayers(layersDir: string): Promise<CachedTree[]> {
  const names = await readdir(layersDir).catch((error) => {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return [] as string[];
    throw error;
  });
  const found: CachedTree[] = [];
  for (const name of names) {
    if (!LAYER_NAME.test(name)) continue;
    const path = join(layersDir, name);
    const ready = await lstat(`${path}.ready`).then((stat) => stat.isFile(), () => false);
    if (!ready || !(await lstat(path)).isDirectory()) continue;
    found.push({ kind: "layer", path, digest: `sha256:${name}`, lastUsedMs: await lastUsedMs(path) });
  }
  return found;
}

/**
 * Removes the layer at `path` unless a build holds its lock or it was used at or after `usedBeforeMs`.
 * `.ready` goes first (the layer is no longer taken), then the folder is renamed to the `.partial` name a
 * build of it would clear, and removed.
 */
async function evictLayer(path: string, options: { layersDir: string; usedBeforeMs: number }): Promise<boolean> {
  const name = path.slice(options.layersDir.length + 1);
  if (!isAbsolute(options.layersDir) || join(options.layersDir, name) !== path || !LAYER_NAME.test(name)) {
    throw new Error(`Refusing to remove ${JSON.stringify(path)}: not a system layer of ${options.layersDir}`);
  }
  const lock = `${path}.lock`;
  try {
    await mkdir(lock);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw error;
  }
  try {
    if (await lastUsedMs(path) >= options.usedBeforeMs) return false;
    await rm(`${path}.ready`, { force: true });
    const doomed = `${path}.partial`;
    await rm(doomed, { recursive: true, force: true });
    await rename(path, doomed);
    await rm(doomed, { recursive: true, force: true });
    await rm(`${path}.used`, { force: true });
    return true;
  } finally {
    await rmdir(lock);
  }
}

/**
 * Removes the `.ready` markers of system layers that name `root` (a layer another host built, pulled into the
 * image store): the layer is then pulled or built again when next asked for.
 */
async function forgetLayersOn(layersDir: string, root: string): Promise<void> {
  const names = await readdir(layersDir).catch(() => [] as string[]);
  for (const name of names.filter((entry) => LAYER_NAME.test(entry.replace(/\.ready$/, "")))) {
    if (!name.endsWith(".ready")) continue;
    const marker = join(layersDir, name);
    const named = (await readFile(marker, "utf8").catch(() => "")).split("\n")[1]?.trim();
    if (named === root) await rm(marker, { force: true });
  }
}

/** Removes the built markers of deployments whose image root is `root` (see the module's comment). */
async function forgetBuiltOn(dataDir: string, root: string): Promise<number> {
  await forgetLayersOn(systemLayersDir(dataDir), root);
  const folder = join(dataDir, "deployments");
  const names = await readdir(folder).catch(() => [] as string[]);
  let forgotten = 0;
  for (const name of names.filter((entry) => entry.endsWith(".built.json"))) {
    const marker = join(folder, name);
    const built = await readFile(marker, "utf8").then((text) => JSON.parse(text), () => null);
    if (built?.image?.root !== root) continue;
    await rm(marker, { force: true });
    forgotten++;
  }
  return forgotten;
}

/** Every tree, those in service said used now. */
async function cachedTrees(options: ImageCacheOptions, inUse: Set<string>): Promise<CachedTree[]> {
  const now = Date.now();
  const roots = (await options.images.roots()).map((root): CachedTree => ({ kind: "root", ...root }));
  const trees = [...roots, ...await listLayers(systemLayersDir(options.dataDir))];
  for (const tree of trees.filter((entry) => inUse.has(entry.path))) {
    if (tree.kind === "root") await options.images.touch(tree.digest);
    else await touchUsed(tree.path);
    tree.lastUsedMs = now;
  }
  return trees;
}

async function evictTree(tree: CachedTree, options: ImageCacheOptions & { usedBeforeMs: number }): Promise<boolean> {
  const { usedBeforeMs } = options;
  if (tree.kind === "root") return await options.images.evict(tree.digest, { usedBeforeMs });
  return await evictLayer(tree.path, { layersDir: systemLayersDir(options.dataDir), usedBeforeMs });
}

async function prunePass(options: ImageCacheOptions, sizes: Map<string, number>): Promise<void> {
  const { logger, boundBytes } = options;
  const inUse = new Set(options.inUse());
  const trees = await cachedTrees(options, inUse);
  let total = 0;
  for (const tree of trees) {
    if (!sizes.has(tree.path)) sizes.set(tree.path, await treeBytes(tree.path));
    total += sizes.get(tree.path)!;
  }
  if (boundBytes === 0 || total <= boundBytes) return;
  const usedBeforeMs = Date.now() - options.minAgeMs;
  const candidates = trees.filter((tree) => !inUse.has(tree.path) && tree.lastUsedMs < usedBeforeMs)
    .sort((a, b) => a.lastUsedMs - b.lastUsedMs);
  for (const tree of candidates) {
    if (total <= boundBytes) break;
    if (!await evictTree(tree, { ...options, usedBeforeMs })) continue;
    const bytes = sizes.get(tree.path)!;
    sizes.delete(tree.path);
    total -= bytes;
    forgetImageRoot(tree.path);
    const forgotten = await forgetBuiltOn(options.dataDir, tree.path);
    logger.info({
      image_cache: tree.kind,
      digest: tree.digest,
      path: tree.path,
      bytes,
      last_used: new Date(tree.lastUsedMs).toISOString(),
      deployments_to_rebuild: forgotten,
      total_bytes: total,
      bound_bytes: boundBytes,
    }, `image cache: evicted the ${tree.kind === "root" ? "image root" : "system layer"} ${tree.digest}`);
  }
  if (total > boundBytes) {
    logger.warn(
      { total_bytes: total, bound_bytes: boundBytes, in_use: inUse.size },
      "image cache: over its bound (RUNPLANE_IMAGE_CACHE_GB); what is left is in service or used recently",
    );
  }
  // Sizes of trees gone some other way are forgotten.
  for (const path of [...sizes.keys()]) if (!trees.some((tree) => tree.path === path)) sizes.delete(path);
}

/**
 * The image cache of this host: call `prune()` at start (once the deployments served here are known) and
 * after each build. Passes run one at a time; a call during a pass gets one more pass after it.
 */
export function startImageCache(options: ImageCacheOptions): ImageCache {
  const sizes = new Map<string, number>();
  let running: Promise<void> | undefined;
  let next: Promise<void> | undefined;
  function pass(): Promise<void> {
    return prunePass(options, sizes).catch((error) =>
      options.logger.error({ err: error }, "image cache: a pass failed; the next build tries again")
    );
  }
  return {
    prune() {
      if (!running) {
        running = pass().finally(() => running = undefined);
        return running;
      }
      next ??= running.then(() => {
        next = undefined;
        running = pass().finally(() => running = undefined);
        return running;
      });
      return next;
    },
    async idle() {
      while (running || next) await (next ?? running);
    },
  };
}
