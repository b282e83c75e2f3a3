/**
 * Real git repositories for tests: a fixture with nested folders, an executable, a symlink, a
 * submodule entry, two branches and a tag; and git blob ids computed without git, to check against.
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { chmod, mkdir, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** An environment that keeps the machine's git settings out of the tests. */
export const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_AUTHOR_NAME: "Test",
  GIT_AUTHOR_EMAIL: "test@example.com",
  GIT_COMMITTER_NAME: "Test",
  GIT_COMMITTER_EMAIL: "test@example.com",
};

/** Runs git in `cwd` (no shell) and resolves with its trimmed stdout. */
export async function git(cwd: string, ...args: string[]): Promise<string> {
  const { stdout } = await run("git", args, { cwd, env: GIT_ENV, maxBuffer: 64 * 1024 * 1024 });
  return stdout.trim();
}

/** The git blob id of `content`, computed from git's object format rather than by git. */
export function blobSha(content: string): string {
  const bytes = Buffer.from(content);
  return createHash("sha1").update(`blob ${bytes.length}\0`).update(bytes).digest("hex");
}

/** The files of the fixture's first commit. */
export const FIXTURE_FILES: Record<string, string> = {
  "README.md": "# Widgets\n",
  "src/main.py": "print('hello')\n",
  "src/lib/util.py": "def util():\n    return 42\n",
  "src/lib/deep/nested/leaf.txt": "leaf\n",
  "bin/run.sh": "#!/bin/sh\necho run\n",
};

/** The fixture's symlink and its target. */
export const FIXTURE_SYMLINK = { path: "latest", target: "src/main.py" };

/** The commit the fixture's submodule entry points at (any id will do: git never reads it). */
export const FIXTURE_SUBMODULE = { path: "vendor/dep", commit: "1234567890abcdef1234567890abcdef12345678" };

/** The commits of a fixture repository. */
export interface FixtureRepo {
  path: string;
  /** The first commit, tagged `v1.0` (annotated). */
  first: string;
  /** `main` after a second commit adding `docs/guide.md`. */
  main: string;
  /** Branch `feature`: the first commit plus `feature.txt`. */
  feature: string;
}

async function put(root: string, path: string, content: string): Promise<void> {
  await mkdir(dirname(join(root, path)), { recursive: true });
  await writeFile(join(root, path), content);
}

/** Creates the fixture repository (with a work tree, default branch `main`) at `path`. */
export async function createFixtureRepo(path: string): Promise<FixtureRepo> {
  await mkdir(path, { recursive: true });
  await git(path, "init", "--quiet", "--initial-branch=main");
  for (const [file, content] of Object.entries(FIXTURE_FILES)) await put(path, file, content);
  await chmod(join(path, "bin/run.sh"), 0o755);
  await symlink(FIXTURE_SYMLINK.target, join(path, FIXTURE_SYMLINK.path));
  await git(path, "add", "--all");
  await git(
    path,
    "update-index",
    "--add",
    "--cacheinfo",
    `160000,${FIXTURE_SUBMODULE.commit},${FIXTURE_SUBMODULE.path}`,
  );
  await git(path, "commit", "--quiet", "-m", "first");
  const first = await git(path, "rev-parse", "HEAD");
  await git(path, "tag", "-a", "v1.0", "-m", "version 1.0");
  await git(path, "checkout", "--quiet", "-b", "feature");
  await put(path, "feature.txt", "a feature\n");
  await git(path, "add", "feature.txt");
  await git(path, "commit", "--quiet", "-m", "feature");
  const feature = await git(path, "rev-parse", "HEAD");
  await git(path, "checkout", "--quiet", "main");
  await put(path, "docs/guide.md", "# Guide\n");
  await git(path, "add", "docs/guide.md");
  await git(path, "commit", "--quiet", "-m", "second");
  const main = await git(path, "rev-parse", "HEAD");
  return { path, first, main, feature };
}
