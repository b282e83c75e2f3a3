/** Owner, repo and ref validation, done before any path or URL is built from them. */
import { type FieldError, ProblemError } from "../problems/mod.ts";
import type { RepoCoordinates } from "./_tree_types.ts";

/** GitHub's account names: letters, digits and single inner dashes, at most 39 characters. */
export const OWNER_PATTERN = /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/;

/** GitHub's repository names: letters, digits, `.`, `_`, `-`, at most 100 characters, never `.` or `..`. */
export const REPO_PATTERN = /^(?!\.{1,2}$)[A-Za-z0-9._-]{1,100}$/;

/**
 * Whether `ref` is a plain branch, tag or commit name: git's ref-name rules (no `..`, `@{`, `~^:?*[\`,
 * spaces or control characters, no leading `-` or `/`), so that git never reads it as an expression or
 * an option.
 */
export function isPlainRef(ref: string): boolean {
  if (ref.length === 0 || ref.length > 255) return false;
  if (/[\x00-\x20\x7f~^:?*[\\]/.test(ref) || ref.includes("..") || ref.includes("@{") || ref.includes("//")) {
    return false;
  }
  if (ref.startsWith("-") || ref.startsWith("/") || ref.endsWith("/") || ref.endsWith(".") || ref.endsWith(".lock")) {
    return false;
  }
  return !ref.split("/").some((part) => part.startsWith("."));
}

/** Throws a 400 problem naming each invalid part of `coordinates` and `ref`. */
export function assertRepoCoordinates(coordinates: RepoCoordinates, ref?: string): void {
  const errors: FieldError[] = [];
  if (!OWNER_PATTERN.test(coordinates.owner)) {
    errors.push({
      path: "path.owner",
      message: "must be a GitHub account name: letters, digits and single dashes, at most 39 characters",
    });
  }
  if (!REPO_PATTERN.test(coordinates.repo)) {
    errors.push({
      path: "path.repo",
      message: "must be a repository name: letters, digits, '.', '_' and '-', at most 100 characters, not '.' or '..'",
    });
  }
  if (ref !== undefined && !isPlainRef(ref)) {
    errors.push({
      path: "query.ref",
      message: "must be a branch, tag or commit sha, without '..', '~', '^', ':' or spaces",
    });
  }
  if (errors.length) {
    throw new ProblemError("validation", errors.map((e) => `${e.path} ${e.message}`).join("; "), { errors });
  }
}
