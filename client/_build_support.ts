/** Build support on the REST API: an app's base-image digest, a repository's tree through a git integration. */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { type AppRef, resolveAppRef } from "./app_ref.ts";
import { errorFromResponse } from "./runplane_error.ts";
import type { BaseImageHash, BaseImageRequest, RepositoryTreeOptions, RepositoryTreeResult } from "./types.ts";

/** The build-support calls of a client. */
export class BuildSupport {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** The digest of an app's build dependencies and whether a build will make or reuse its virtualenv. */
  baseImageHash(
    app: AppRef,
    request: BaseImageRequest,
    callOptions: { signal?: AbortSignal } = {},
  ): Promise<BaseImageHash> {
    const ref = resolveAppRef(app);
    return unwrap(this.#client.api.POST("/v3/projects/{project_id}/apps/{app_id}/base-image", {
      params: { path: { project_id: ref.project, app_id: ref.app } },
      body: request,
      signal: callOptions.signal,
    }));
  }

  /** A repository's tree (`"owner/repo"`), or only its ETag when `ifNoneMatch` still matches. */
  async repositoryTree(
    project: string,
    repository: string,
    treeOptions: RepositoryTreeOptions = {},
  ): Promise<RepositoryTreeResult> {
    const [owner, repo, ...rest] = repository.split("/");
    if (!owner || !repo || rest.length) throw new TypeError(`Invalid repository "${repository}": write <owner>/<repo>`);
    const { data, error, response } = await this.#client.api.GET(
      "/v4/projects/{project_id}/integrations/github/repos/{owner}/{repo}/tree",
      {
        params: {
          path: { project_id: project, owner, repo },
          query: treeOptions.ref ? { ref: treeOptions.ref } : {},
          header: treeOptions.ifNoneMatch ? { "If-None-Match": treeOptions.ifNoneMatch } : {},
        },
        signal: treeOptions.signal,
      },
    );
    const etag = response.headers.get("etag") ?? "";
    if (response.status === 304) return { notModified: true, etag };
    if (!response.ok || !data) throw await errorFromResponse(response, error);
    return { notModified: false, etag, tree: data };
  }
}
