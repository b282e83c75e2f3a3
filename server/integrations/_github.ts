/**
 * The GitHub REST provider: resolves refs with `GET /repos/{o}/{r}` and `GET /repos/{o}/{r}/commits/{ref}`,
 * reads `GET /repos/{o}/{r}/git/trees/{sha}?recursive=1`, and walks subtrees when GitHub truncates.
 */
import { startDeadline } from "../deadline/mod.ts";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { repackSubfolder } from "./_archive.ts";
import { ProblemError } from "../problems/mod.ts";
import { GithubApi, type GithubProviderOptions, objectId } from "./_github_api.ts";
import { readGithubTree } from "./_github_tree.ts";
import type { TreeProvider } from "./_tree_types.ts";

export { GITHUB_API_URL, type GithubProviderOptions } from "./_github_api.ts";

/** Creates a provider reading from GitHub (or GitHub Enterprise Server at `apiUrl`) with `token`. */
export function createGithubProvider(options: GithubProviderOptions): TreeProvider {
  const api = new GithubApi(options);
  const { apiUrl, host, headers } = api;

  return {
    source: `github:${apiUrl}`,
    async resolve(coordinates, ref, call = {}) {
      const base = api.repoPath(coordinates);
      const name = `${coordinates.owner}/${coordinates.repo}`;
      const noRepo = `GitHub has no repository ${name}, or the project's token cannot read it`;
      let resolvedRef = ref;
      if (resolvedRef === undefined) {
        const repo = await api.get<{ default_branch?: unknown }>(base, {
          missing: { notFound: noRepo },
          signal: call.signal,
        });
        if (typeof repo.default_branch !== "string" || !repo.default_branch) {
          throw new ProblemError("bad-gateway", `GitHub did not say which branch of ${name} is the default`);
        }
        resolvedRef = repo.default_branch;
      }
      const noRef = `GitHub has no branch, tag or commit "${resolvedRef}" in ${name}`;
      const encodedRef = resolvedRef.split("/").map(encodeURIComponent).join("/");
      const commit = await api.get<{ sha?: unknown; commit?: { tree?: { sha?: unknown } } }>(
        `${base}/commits/${encodedRef}`,
        {
          missing: {
            notFound: ref === undefined ? noRepo : `${noRef}, or no repository ${name}`,
            unprocessable: noRef,
            conflict: `The repository ${name} is empty: push a commit to it first`,
          },
          signal: call.signal,
        },
      );
      return {
        ref: resolvedRef,
        commit: objectId(commit.sha, "commit"),
        tree: objectId(commit.commit?.tree?.sha, "tree"),
      };
    },
    async readTree(coordinates, resolved, call = {}) {
      return await readGithubTree(api, { coordinates, resolved, signal: call.signal });
    },
    async archive(coordinates, resolved, call) {
      const name = `${coordinates.owner}/${coordinates.repo}`;
      const deadline = startDeadline(options.timeoutMs ?? 120_000, { signal: call.signal });
      try {
        // GitHub answers 302 to codeload; fetch follows it (and drops the token for the other host).
        const response = await fetch(`${apiUrl}${api.repoPath(coordinates)}/tarball/${resolved.commit}`, {
          headers,
          signal: deadline.signal,
        }).catch((error) => {
          throw new ProblemError("bad-gateway", `Could not reach GitHub at ${host}: ${(error as Error).message}`);
        });
        if (!response.ok || !response.body) {
          return await api.failed(response, { notFound: `GitHub has no archive of ${name} at ${resolved.commit}` });
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
