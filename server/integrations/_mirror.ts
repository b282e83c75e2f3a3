/** `runplane repo add`: mirrors a repository into a project's local repos folder. */
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { GitError, runGit } from "./_git_process.ts";
import { projectReposDir } from "./_local_git.ts";
import { assertRepoCoordinates } from "./_repo_names.ts";

/** Options of `mirrorRepository`. */
export interface MirrorOptions {
  dataDir: string;
  projectId: string;
  /** The name the API serves it under: `<owner>/<repo>`. */
  owner: string;
  repo: string;
  signal?: AbortSignal;
}

/**
 * Clones `source` (a local path or a URL git understands) as a bare mirror, every branch and tag, to
 * `<data dir>/repos/<project_id>/<owner>/<repo>.git`; resolves with that folder. Throws when a
 * repository of that name already exists or git fails.
 */
export async function mirrorRepository(source: string, options: MirrorOptions): Promise<string> {
  assertRepoCoordinates({ owner: options.owner, repo: options.repo });
  const ownerDir = join(projectReposDir(options.dataDir, options.projectId), options.owner);
  const bare = options.repo.endsWith(".git") ? options.repo : `${options.repo}.git`;
  const plain = bare.slice(0, -".git".length);
  for (const name of [plain, bare]) {
    if (existsSync(join(ownerDir, name))) {
      throw new Error(
        `A repository ${options.owner}/${options.repo} already exists at ${
          join(ownerDir, name)
        }: remove it first or choose another --as`,
      );
    }
  }
  const from = existsSync(source) ? resolve(source) : source;
  await mkdir(ownerDir, { recursive: true });
  const destination = join(ownerDir, bare);
  try {
    await runGit(["clone", "--mirror", "--quiet", "--", from, destination], {
      cwd: ownerDir,
      signal: options.signal,
      timeoutMs: 600_000,
    });
  } catch (error) {
    if (error instanceof GitError) {
      throw new Error(`Could not mirror ${source}: ${error.stderr.trim().split("\n").pop() ?? "git clone failed"}`);
    }
    throw error;
  }
  return destination;
}
