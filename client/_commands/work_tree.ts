/**
 * The git commit an app folder is packed from: `HEAD` of the work tree it is in, and whether the folder
 * holds changes `HEAD` does not (`git status`), counting only files the bundle carries.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

const OBJECT_ID = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

/** A folder's commit: `HEAD`, and whether the folder's files differ from it. */
export interface WorkTreeCommit {
  commit: string;
  dirty: boolean;
}

/** `0123abc`, or `0123abc-dirty` when the folder differs from the commit. */
export function commitLabel(source: WorkTreeCommit): string {
  return `${source.commit.slice(0, 7)}${source.dirty ? "-dirty" : ""}`;
}

async function git(dir: string, args: string[]): Promise<string> {
  const { stdout } = await run("git", args, { cwd: dir, maxBuffer: 64 * 1024 * 1024, encoding: "utf8" });
  return stdout;
}

/** The paths `git status --porcelain -z` lists (a rename's or copy's both paths), from the repository's root. */
export function statusPaths(porcelain: string): string[] {
  const records = porcelain.split("\0").filter((r) => r !== "");
  const paths: string[] = [];
  for (let i = 0; i < records.length; i++) {
    const record = records[i];
    paths.push(record.slice(3));
    // A rename or copy is followed by the path it came from.
    if (record[0] === "R" || record[0] === "C") paths.push(records[++i] ?? "");
  }
  return paths;
}

/**
 * `dir`'s commit when it is in a git work tree with a commit; null otherwise (no git, no repository, no
 * commit yet). `excluded` says which paths (relative to `dir`) the bundle leaves out: a change there does
 * not make the folder dirty.
 */
export async function workTreeCommit(
  dir: string,
  excluded: (path: string) => boolean,
): Promise<WorkTreeCommit | null> {
  let head: string;
  let prefix: string;
  let status: string;
  try {
    head = (await git(dir, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])).trim();
    prefix = (await git(dir, ["rev-parse", "--show-prefix"])).trim();
    status = await git(dir, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."]);
  } catch {
    return null;
  }
  if (!OBJECT_ID.test(head)) return null;
  const dirty = statusPaths(status)
    .filter((path) => path.startsWith(prefix))
    .some((path) => !excluded(path.slice(prefix.length)));
  return { commit: head, dirty };
}
