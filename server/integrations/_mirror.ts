/** `runplane repo add` and `repo sync`: mirrors a repository into a project's local repos folder, and updates it. */
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { GitError, type GitOptions, runGit } from "./_git_process.ts";
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
  // Absolute: git runs in `ownerDir`, where a relative destination (a relative data dir's) would nest.
  const ownerDir = resolve(projectReposDir(options.dataDir, options.projectId), options.owner);
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

/** What `syncRepository` did. */
export interface SyncOutcome {
  /** The mirror's folder. */
  path: string;
  /** Where it fetched from: the source given to `runplane repo add`. */
  source: string;
  /** Branches, tags and other refs that are new, moved or gone, short names (`main`, `v1.0`), sorted. */
  changed: string[];
  /** The default branch and its commit after the sync; null for an empty repository. */
  head: { branch: string; sha: string } | null;
}

/** The mirror's folder under `<owner>/`, with or without the `.git` suffix; null when there is none. */
function existingMirror(options: MirrorOptions): string | null {
  const ownerDir = resolve(projectReposDir(options.dataDir, options.projectId), options.owner);
  const bare = options.repo.endsWith(".git") ? options.repo : `${options.repo}.git`;
  for (const name of [bare, bare.slice(0, -".git".length)]) {
    if (existsSync(join(ownerDir, name))) return join(ownerDir, name);
  }
  return null;
}

/** git's answer, or null when git fails (an unset config key, an unborn HEAD). */
async function gitOrNull(args: string[], options: GitOptions): Promise<string | null> {
  try {
    return await runGit(args, options);
  } catch (error) {
    if (error instanceof GitError) return null;
    throw error;
  }
}

async function refSnapshot(options: GitOptions): Promise<Map<string, string>> {
  const refs = new Map<string, string>();
  const listing = await runGit(["for-each-ref", "--format=%(objectname) %(refname)"], options);
  for (const line of listing.split("\n")) {
    const space = line.indexOf(" ");
    if (space !== -1) refs.set(line.slice(space + 1), line.slice(0, space));
  }
  return refs;
}

function shortRef(ref: string): string {
  return ref.replace(/^refs\/(heads|tags)\//, "");
}

/**
 * Updates a mirror made by `mirrorRepository` from its source: fetches every branch and tag (refs gone
 * from the source are removed, as in a mirror) and follows the source's default branch, so the local
 * provider serves the new commits at once. Throws when there is no such mirror, when the folder is not a
 * mirror made by `runplane repo add` (a repository placed there by hand is updated with git), or when
 * git fails.
 */
export async function syncRepository(options: MirrorOptions): Promise<SyncOutcome> {
  assertRepoCoordinates({ owner: options.owner, repo: options.repo });
  const name = `${options.owner}/${options.repo}`;
  const path = existingMirror(options);
  if (!path) {
    throw new Error(
      `No repository ${name} in project ${options.projectId}: mirror one with runplane repo add <path-or-url> --project ${options.projectId} --as ${name}`,
    );
  }
  const git: GitOptions = { cwd: path, signal: options.signal };
  const source = await gitOrNull(["config", "--get", "remote.origin.url"], git);
  const mirror = await gitOrNull(["config", "--bool", "--get", "remote.origin.mirror"], git);
  if (!source || mirror !== "true") {
    throw new Error(`${name} at ${path} is not a mirror made by runplane repo add: update it with git itself`);
  }
  const before = await refSnapshot(git);
  try {
    await runGit(["fetch", "--prune", "--quiet", "origin"], { ...git, timeoutMs: 600_000 });
  } catch (error) {
    if (error instanceof GitError) {
      throw new Error(
        `Could not sync ${name} from ${source}: ${error.stderr.trim().split("\n").pop() || "git fetch failed"}`,
      );
    }
    throw error;
  }
  // A mirror's HEAD is its own: follow the source when its default branch changed.
  const remoteHead = await gitOrNull(["ls-remote", "--symref", "origin", "HEAD"], { ...git, timeoutMs: 600_000 });
  const symref = /^ref: (refs\/heads\/\S+)\tHEAD$/m.exec(remoteHead ?? "");
  if (symref) await runGit(["symbolic-ref", "HEAD", symref[1]], git);
  const after = await refSnapshot(git);
  const changed = new Set<string>();
  for (const [ref, sha] of after) if (before.get(ref) !== sha) changed.add(shortRef(ref));
  for (const ref of before.keys()) if (!after.has(ref)) changed.add(shortRef(ref));
  const branch = await gitOrNull(["symbolic-ref", "--short", "HEAD"], git);
  const sha = await gitOrNull(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], git);
  return {
    path,
    source,
    changed: [...changed].sort(),
    head: branch && sha ? { branch, sha } : null,
  };
}
