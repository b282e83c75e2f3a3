/**
 * The local provider: repositories under `<data dir>/repos/<project_id>/<owner>/<repo>` (bare, or with a
 * work tree; a `.git` suffix on the folder is accepted), read with git's plumbing.
 */
import { realpath, stat } from "node:fs/promises";
import { join, sep } from "node:path";
import { ProblemError } from "../problems/mod.ts";
import { gzipLimited } from "./_archive.ts";
import { GitError, gitOutputStream, runGit, streamGit } from "./_git_process.ts";
import { assertRepoCoordinates } from "./_repo_names.ts";
import {
  entryTypeOfMode,
  type RepoCoordinates,
  type ResolvedRef,
  type TreeEntry,
  type TreeProvider,
} from "./_tree_types.ts";

/** The folder of one project's local repositories. */
export function projectReposDir(dataDir: string, projectId: string): string {
  return join(dataDir, "repos", projectId);
}

function fullName(coordinates: RepoCoordinates): string {
  return `${coordinates.owner}/${coordinates.repo}`;
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isDirectory();
  } catch {
    return false;
  }
}

/** The repository's folder, checked to be inside `root` even through symlinks; 404 when there is none. */
async function locate(root: string, coordinates: RepoCoordinates): Promise<string> {
  assertRepoCoordinates(coordinates);
  const base = join(root, coordinates.owner);
  const candidates = [join(base, coordinates.repo)];
  if (!coordinates.repo.endsWith(".git")) candidates.push(join(base, `${coordinates.repo}.git`));
  for (const candidate of candidates) {
    if (!(await isDirectory(candidate))) continue;
    const [real, realRoot] = await Promise.all([realpath(candidate), realpath(root)]);
    if (!real.startsWith(realRoot + sep)) {
      throw new ProblemError(
        "not-found",
        `The repository ${
          fullName(coordinates)
        } points outside the project's repos folder; mirror it there with runplane repo add`,
      );
    }
    return candidate;
  }
  throw new ProblemError(
    "not-found",
    `No repository ${fullName(coordinates)} in this project: mirror one with runplane repo add <path-or-url> --as ${
      fullName(coordinates)
    }`,
  );
}

function notARepository(error: unknown, coordinates: RepoCoordinates): never {
  if (error instanceof GitError && /not a git repository/i.test(error.stderr)) {
    throw new ProblemError(
      "not-found",
      `The folder of ${fullName(coordinates)} is not a git repository: mirror one with runplane repo add`,
    );
  }
  throw error;
}

/** Parses one `ls-tree -l -z` record: `<mode> <type> <sha> <size>\t<path>`. */
function parseRecord(record: string): TreeEntry {
  const tab = record.indexOf("\t");
  const [mode, , sha, size] = record.slice(0, tab).split(" ").filter(Boolean);
  const type = entryTypeOfMode(mode);
  if (tab === -1 || !type || !sha) {
    throw new Error(`Unexpected git ls-tree record: ${JSON.stringify(record.slice(0, 200))}`);
  }
  const entry: TreeEntry = { path: record.slice(tab + 1), type, mode, sha };
  if ((type === "file" || type === "symlink") && size !== "-") entry.size = Number(size);
  return entry;
}

/** Creates the local provider over `root`, the project's repos folder (see `projectReposDir`). */
export function createLocalGitProvider(root: string): TreeProvider {
  return {
    source: "local",
    async resolve(coordinates, ref, options = {}) {
      const cwd = await locate(root, coordinates);
      let name = ref;
      if (name === undefined) {
        name = await runGit(["symbolic-ref", "--quiet", "--short", "HEAD"], { cwd, signal: options.signal })
          .catch((
            error,
          ) => (error instanceof GitError && error.exitCode === 1 ? "HEAD" : notARepository(error, coordinates)));
      }
      try {
        // The ref was validated as a plain name, so git can read it neither as an option nor an expression.
        const [commit, tree] =
          (await runGit(["rev-parse", `${name}^{commit}`, `${name}^{tree}`, "--"], { cwd, signal: options.signal }))
            .split("\n");
        return { ref: name, commit, tree } satisfies ResolvedRef;
      } catch (error) {
        if (!(error instanceof GitError) || !/bad revision|unknown revision/i.test(error.stderr)) {
          notARepository(error, coordinates);
        }
      }
      const anyRef = await runGit(["for-each-ref", "--count=1", "--format=%(refname)"], {
        cwd,
        signal: options.signal,
      });
      if (!anyRef) {
        throw new ProblemError(
          "not-found",
          `The repository ${fullName(coordinates)} is empty: push a commit to it first`,
        );
      }
      throw new ProblemError(
        "not-found",
        `The repository ${fullName(coordinates)} has no branch, tag or commit "${name}"`,
      );
    },
    async readTree(coordinates, resolved, options = {}) {
      const cwd = await locate(root, coordinates);
      const entries: TreeEntry[] = [];
      await streamGit(["ls-tree", "-r", "-t", "-l", "--full-tree", "-z", resolved.tree], {
        cwd,
        signal: options.signal,
        separator: "\0",
        onRecord: (record) => entries.push(parseRecord(record)),
      });
      return entries;
    },
    async archive(coordinates, resolved, options) {
      const cwd = await locate(root, coordinates);
      // `<commit>:<path>` names the folder's tree (`<commit>:` the root's), which git archives at the root.
      const treeish = `${resolved.commit}:${options.path}`;
      const type = await runGit(["cat-file", "-t", treeish], { cwd, signal: options.signal }).catch(() => "");
      if (type !== "tree") {
        throw new ProblemError(
          "not-found",
          `The repository ${fullName(coordinates)} has no folder ${options.path || "/"} at ${resolved.ref}`,
        );
      }
      return await gzipLimited(
        gitOutputStream(["archive", "--format=tar", treeish], { cwd, signal: options.signal }),
        options.maxBytes,
      );
    },
  };
}
