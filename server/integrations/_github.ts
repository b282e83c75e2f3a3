/**
 * The GitHub REST provider: resolves refs with `GET /repos/{o}/{r}` and `GET /repos/{o}/{r}/commits/{ref}`,
 * reads `GET /repos/{o}/{r}/git/trees/{sha}?recursive=1`, and walks subtrees when GitHub truncates.
 */
import { startDeadline } from "../deadline/mod.ts";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { repackSubfolder } from "./_archive.ts";
import { ProblemError } from "../problems/mod.ts";
import { assertRepoCoordinates } from "./_repo_names.ts";
import { entryTypeOfMode, type RepoCoordinates, type TreeEntry, type TreeProvider } from "./_tree_types.ts";

/** The public GitHub API; GitHub Enterprise Server uses `https://<host>/api/v3`. */
export const GITHUB_API_URL = "https://api.github.com";

/** Options of `createGithubProvider`. */
export interface GithubProviderOptions {
  /** The token, sent as `Authorization: Bearer <token>`; never logged. */
  token: string;
  /** The API's base URL (default `https://api.github.com`). */
  apiUrl?: string;
  /** Gives up on one GitHub request after this many ms (default 30 s). */
  timeoutMs?: number;
}

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

/** What to say for GitHub answers that mean "not there". */
interface Missing {
  notFound: string;
  unprocessable?: string;
  conflict?: string;
}

const OBJECT_ID = /^[0-9a-f]{40}([0-9a-f]{24})?$/;

function retryAfterSeconds(headers: Headers): number {
  const retryAfter = headers.get("retry-after");
  if (retryAfter && /^\d+$/.test(retryAfter.trim())) return Math.max(1, Number(retryAfter));
  const reset = headers.get("x-ratelimit-reset");
  if (reset && /^\d+$/.test(reset.trim())) return Math.max(1, Math.ceil(Number(reset) - Date.now() / 1000));
  return 60;
}

function isRateLimited(response: Response): boolean {
  if (response.status === 429) return true;
  return response.status === 403
    && (response.headers.has("retry-after") || response.headers.get("x-ratelimit-remaining") === "0");
}

function objectId(value: unknown, what: string): string {
  if (typeof value !== "string" || !OBJECT_ID.test(value)) {
    throw new ProblemError("bad-gateway", `GitHub answered without a valid ${what} sha`);
  }
  return value;
}

/** Creates a provider reading from GitHub (or GitHub Enterprise Server at `apiUrl`) with `token`. */
export function createGithubProvider(options: GithubProviderOptions): TreeProvider {
  const apiUrl = (options.apiUrl ?? GITHUB_API_URL).replace(/\/+$/, "");
  const host = new URL(apiUrl).host;
  const headers = {
    Accept: "application/vnd.github+json",
    Authorization: `Bearer ${options.token}`,
    "User-Agent": "runplane",
    "X-GitHub-Api-Version": "2022-11-28",
  };

  async function get<T>(path: string, missing: Missing, signal?: AbortSignal): Promise<T> {
    const deadline = startDeadline(options.timeoutMs ?? 30_000, { signal });
    let response: Response;
    try {
      response = await fetch(`${apiUrl}${path}`, { headers, signal: deadline.signal });
    } catch (error) {
      deadline.clear();
      const reason = deadline.timedOut
        ? "it did not answer in time"
        : ((error as Error).cause as Error | undefined)?.message ?? (error as Error).message;
      throw new ProblemError("bad-gateway", `Could not reach GitHub at ${host}: ${reason}; try again later`);
    }
    if (response.ok) {
      try {
        return (await response.json()) as T;
      } catch {
        const reason = deadline.timedOut ? "did not finish its answer in time" : "answered with malformed JSON";
        throw new ProblemError("bad-gateway", `GitHub at ${host} ${reason} for ${path.split("?")[0]}; try again later`);
      } finally {
        deadline.clear();
      }
    }
    deadline.clear();
    return await failed(response, missing);
  }

  /** Throws the problem for a GitHub answer that is not a success. */
  async function failed(response: Response, missing: Missing): Promise<never> {
    await response.body?.cancel();
    if (isRateLimited(response)) {
      const seconds = retryAfterSeconds(response.headers);
      throw new ProblemError(
        "service-unavailable",
        `GitHub's rate limit for this project's token is exhausted; try again in ${seconds} seconds`,
        {
          headers: { "Retry-After": String(seconds) },
        },
      );
    }
    if (response.status === 404) throw new ProblemError("not-found", missing.notFound);
    if (response.status === 422 && missing.unprocessable) throw new ProblemError("not-found", missing.unprocessable);
    if (response.status === 409 && missing.conflict) throw new ProblemError("not-found", missing.conflict);
    if (response.status === 401) {
      throw new ProblemError(
        "bad-gateway",
        `GitHub at ${host} rejected the project's token (401): set a valid one with runplane integration github`,
      );
    }
    throw new ProblemError("bad-gateway", `GitHub at ${host} answered ${response.status}; try again later`);
  }

  function repoPath(coordinates: RepoCoordinates): string {
    assertRepoCoordinates(coordinates);
    return `/repos/${encodeURIComponent(coordinates.owner)}/${encodeURIComponent(coordinates.repo)}`;
  }

  return {
    source: `github:${apiUrl}`,
    async resolve(coordinates, ref, call = {}) {
      const base = repoPath(coordinates);
      const name = `${coordinates.owner}/${coordinates.repo}`;
      const noRepo = `GitHub has no repository ${name}, or the project's token cannot read it`;
      let resolvedRef = ref;
      if (resolvedRef === undefined) {
        const repo = await get<{ default_branch?: unknown }>(base, { notFound: noRepo }, call.signal);
        if (typeof repo.default_branch !== "string" || !repo.default_branch) {
          throw new ProblemError("bad-gateway", `GitHub did not say which branch of ${name} is the default`);
        }
        resolvedRef = repo.default_branch;
      }
      const noRef = `GitHub has no branch, tag or commit "${resolvedRef}" in ${name}`;
      const encodedRef = resolvedRef.split("/").map(encodeURIComponent).join("/");
      const commit = await get<{ sha?: unknown; commit?: { tree?: { sha?: unknown } } }>(
        `${base}/commits/${encodedRef}`,
        {
          notFound: ref === undefined ? noRepo : `${noRef}, or no repository ${name}`,
          unprocessable: noRef,
          conflict: `The repository ${name} is empty: push a commit to it first`,
        },
        call.signal,
      );
      return {
        ref: resolvedRef,
        commit: objectId(commit.sha, "commit"),
        tree: objectId(commit.commit?.tree?.sha, "tree"),
      };
    },
    async readTree(coordinates, resolved, call = {}) {
      const base = repoPath(coordinates);
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
        const recursive = await get<GithubTree>(`${base}/git/trees/${sha}?recursive=1`, missing, call.signal);
        if (!recursive.truncated) {
          for (const item of recursive.tree) add(item, prefix);
          return;
        }
        // GitHub caps a recursive answer; list this level alone and walk each subtree instead.
        const level = await get<GithubTree>(`${base}/git/trees/${sha}`, missing, call.signal);
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
    },
    async archive(coordinates, resolved, call) {
      const name = `${coordinates.owner}/${coordinates.repo}`;
      const deadline = startDeadline(options.timeoutMs ?? 120_000, { signal: call.signal });
      try {
        // GitHub answers 302 to codeload; fetch follows it (and drops the token for the other host).
        const response = await fetch(`${apiUrl}${repoPath(coordinates)}/tarball/${resolved.commit}`, {
          headers,
          signal: deadline.signal,
        }).catch((error) => {
          throw new ProblemError("bad-gateway", `Could not reach GitHub at ${host}: ${(error as Error).message}`);
        });
        if (!response.ok || !response.body) {
          return await failed(response, { notFound: `GitHub has no archive of ${name} at ${resolved.commit}` });
        }
        return await repackSubfolder(Readable.fromWeb(response.body as NodeReadableStream), {
          path: call.path,
          maxBytes: call.maxBytes,
          what: `${name} at ${resolved.ref}`,
        });
      } finally {
        deadline.clear();
      }
    },
  };
}
