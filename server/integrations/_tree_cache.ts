/**
 * Trees by commit: a commit's tree never changes, so once read it is kept, least recently used first
 * out, bounded by the total number of entries held. Concurrent misses for one key share one read.
 */
import type { TreeEntry } from "./_tree_types.ts";

/** The outcome of `TreeCache.getOrLoad`. */
export interface CachedTree {
  entries: TreeEntry[];
  /** True when the tree came from the cache (or a read already under way) instead of a new read. */
  hit: boolean;
}

/** A bounded cache of trees. */
export interface TreeCache {
  /** The cached tree under `key`, else `load()`'s, which is then cached. */
  getOrLoad(key: string, load: () => Promise<TreeEntry[]>): Promise<CachedTree>;
  /** How many entries (paths) the cache holds now. */
  readonly size: number;
}

/** Creates a cache holding at most `maxEntries` paths in all; a larger tree is served but not kept. */
export function createTreeCache(maxEntries: number): TreeCache {
  const trees = new Map<string, TreeEntry[]>();
  const loading = new Map<string, Promise<TreeEntry[]>>();
  let size = 0;

  function keep(key: string, entries: TreeEntry[]): void {
    if (entries.length > maxEntries || trees.has(key)) return;
    trees.set(key, entries);
    size += entries.length;
    for (const [oldKey, old] of trees) {
      if (size <= maxEntries) break;
      trees.delete(oldKey);
      size -= old.length;
    }
  }

  return {
    get size() {
      return size;
    },
    async getOrLoad(key, load) {
      const cached = trees.get(key);
      if (cached) {
        trees.delete(key);
        trees.set(key, cached);
        return { entries: cached, hit: true };
      }
      const pending = loading.get(key);
      if (pending) return { entries: await pending, hit: true };
      const promise = load();
      loading.set(key, promise);
      try {
        const entries = await promise;
        keep(key, entries);
        return { entries, hit: false };
      } finally {
        loading.delete(key);
      }
    },
  };
}
