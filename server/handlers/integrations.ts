import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";

type IntegrationHandlers = Pick<Handlers, "getRepositoryTree">;

/** Whether an `If-None-Match` value (a list of ETags, weak or strong, or `*`) matches `tag`. */
function matchesETag(ifNoneMatch: string | undefined, tag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.split(",").some((candidate) => {
    const value = candidate.trim().replace(/^W\//, "");
    return value === "*" || value === `"${tag}"`;
  });
}

/** Source-repository integrations. */
export function integrationHandlers(context: ServerContext): IntegrationHandlers {
  return {
    async getRepositoryTree({ path, query, header, signal }) {
      const found = await context.trees.resolve(path.project_id, {
        owner: path.owner,
        repo: path.repo,
        ref: query.ref,
        signal,
      });
      const headers = { ETag: `"${found.tree}"` };
      if (matchesETag(header["If-None-Match"], found.tree)) return { status: 304, headers };
      const entries = await found.entries();
      return {
        status: 200,
        contentType: "application/json",
        headers,
        body: { owner: path.owner, repo: path.repo, ref: found.ref, sha: found.commit, entries },
      };
    },
  };
}
