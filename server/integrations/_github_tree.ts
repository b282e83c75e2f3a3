/**
 * A commit's tree read from GitHub (see _github.ts): `GET /repos/{o}/{r}/git/trees/{sha}?recursive=1`,
 * walking subtrees one level at a time when GitHub truncates.
 */
import { ProblemError } from "../problems/mod.ts";
import { type GithubApi, objectId } from "./_github_api.ts";
import { entryTypeOfMode, type RepoCoordinates, type ResolvedRef, type TreeEntry } from "./_tree_types.ts";

interface GithubTreeItem {
  path: string;
  mode: string;
  type: string;
  sha: string;
  size?: number;
}

interface GithubTree {
  sha: string;
  tree: GithubTreeItem[];
  truncated: boolean;
}

/** What `readGithubTree` reads. */
export interface GithubTreeRequest {
  coordinates: RepoCoordinates;
  resolved: ResolvedRef;
  signal?: AbortSignal;
}

/** Every entry of `resolved`'s tree, as GitHub lists them. */
export async function readGithubTree(api: GithubApi, request: GithubTreeRequest): Promise<TreeEntry[]> {
  const { coordinates, resolved, signal } = request;
  const base = api.repoPath(coordinates);
  const entries: TreeEntry[] = [];
  const missing = {
    notFound: `GitHub no longer has the tree of ${coordinates.owner}/${coordinates.repo} at ${resolved.commit}`,
  };
  function add(item: GithubTreeItem, prefix: string): void {
    const type = entryTypeOfMode(item.mode);
    if (!type || typeof item.path !== "string") {
      throw new ProblemError("bad-gateway", `GitHub answered a tree entry with mode ${item.mode}`);
    }
    const entry: TreeEntry = {
      path: prefix + item.path,
      type,
      mode: item.mode,
      sha: objectId(item.sha, "tree entry"),
    };
    if ((type === "file" || type === "symlink") && typeof item.size === "number") entry.size = item.size;
    entries.push(entry);
  }
  async function walk(sha: string, prefix: string): Promise<void> {
    const recursive = await api.get<GithubTree>(`${base}/git/trees/${sha}?recursive=1`, { missing, signal });
    if (!recursive.truncated) {
      for (const item of recursive.tree) add(item, prefix);
      return;
    }
    // GitHub caps a recursive answer; list this level alone and walk each subtree instead.
    const level = await api.get<GithubTree>(`${base}/git/trees/${sha}`, { missing, signal });
    if (level.truncated) {
      throw new ProblemError(
        "bad-gateway",
        `A folder of ${coordinates.owner}/${coordinates.repo} has more entries than GitHub lists`,
      );
    }
    for (const item of level.tree) {
      add(item, prefix);
      if (item.type === "tree") await walk(objectId(item.sha, "tree"), `${prefix}${item.path}/`);
    }
  }
  await walk(resolved.tree, "");
  return entries;
}
