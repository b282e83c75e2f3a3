/**
 * The indented text view of a repository tree that `runplane tree` prints; public so that other tools
 * (and the tests) format a tree the same way.
 */
import type { RepositoryTree } from "./mod.ts";

/**
 * The indented view of a tree: a heading with the repository, ref and short commit, then one line per
 * entry, two spaces per level, directories ending in `/`, symlinks marked `@`, submodules with their
 * commit. Relies on the contract's order (sorted by path, directories included).
 */
export function formatTree(tree: RepositoryTree): string {
  const lines = [`${tree.owner}/${tree.repo} @ ${tree.ref} (${tree.sha.slice(0, 7)})`];
  for (const entry of tree.entries) {
    const segments = entry.path.split("/");
    const name = segments[segments.length - 1];
    const indent = "  ".repeat(segments.length - 1);
    const suffix = entry.type === "directory"
      ? "/"
      : entry.type === "symlink"
      ? "@"
      : entry.type === "submodule"
      ? ` -> ${entry.sha.slice(0, 7)}`
      : "";
    lines.push(`${indent}${name}${suffix}`);
  }
  return lines.join("\n");
}
