/** The shapes every tree provider shares. */

/** What a tree entry is. */
export type TreeEntryType = "file" | "directory" | "symlink" | "submodule";

/** One path in a repository's tree. */
export interface TreeEntry {
  path: string;
  type: TreeEntryType;
  /** git's octal mode, e.g. `100755`. */
  mode: string;
  sha: string;
  /** Bytes, for files and symlinks. */
  size?: number;
}

/** A repository, named as the API names it. */
export interface RepoCoordinates {
  owner: string;
  repo: string;
}

/** A ref resolved to its commit and that commit's root tree. */
export interface ResolvedRef {
  /** The ref asked for, or the default branch's name. */
  ref: string;
  commit: string;
  tree: string;
}

/** Options of a provider call. */
export interface ProviderCallOptions {
  signal?: AbortSignal;
}

/** A source of repository trees: the local git folder or GitHub. */
export interface TreeProvider {
  /** Which source this is, e.g. `local` or `github:https://api.github.com`; part of the cache key. */
  readonly source: string;
  /** Resolves `ref` (the default branch when undefined); throws a 404 problem for an unknown repo or ref. */
  resolve(coordinates: RepoCoordinates, ref: string | undefined, options?: ProviderCallOptions): Promise<ResolvedRef>;
  /** Every entry of `resolved`'s tree, every level, in any order. */
  readTree(coordinates: RepoCoordinates, resolved: ResolvedRef, options?: ProviderCallOptions): Promise<TreeEntry[]>;
  /**
   * The folder `path` (checked by `archivePath`; `""` the root) of `resolved` as a gzip tarball with the
   * folder at its root; 404 when it is no folder, 413 past `maxBytes`.
   */
  archive(
    coordinates: RepoCoordinates,
    resolved: ResolvedRef,
    options: ProviderCallOptions & { path: string; maxBytes: number },
  ): Promise<Uint8Array>;
}

const TYPES_BY_MODE: Record<string, TreeEntryType> = {
  "040000": "directory",
  "100644": "file",
  "100755": "file",
  "100664": "file",
  "120000": "symlink",
  "160000": "submodule",
};

/** The entry type of a git mode (`040000`, `100755`, …); undefined for a mode git never writes. */
export function entryTypeOfMode(mode: string): TreeEntryType | undefined {
  return TYPES_BY_MODE[mode];
}

/** Sorts entries by path in place (code-unit order, the same for every provider) and returns them. */
export function sortByPath(entries: TreeEntry[]): TreeEntry[] {
  return entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
