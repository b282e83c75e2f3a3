/** A project's secrets on the REST API (the `deploy` scope): listed by name, set, deleted; never read back. */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { errorFromResponse } from "./runplane_error.ts";
import type { ProjectSecret } from "./types.ts";

/** The project-secret calls of a client. */
export class ProjectSecrets {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** The project's secrets by name; never a value. */
  async listProjectSecrets(project: string, call: { signal?: AbortSignal } = {}): Promise<ProjectSecret[]> {
    const list = await unwrap(this.#client.api.GET("/v3/projects/{project_id}/secrets", {
      params: { path: { project_id: project } },
      signal: call.signal,
    }));
    return list.secrets;
  }

  /** Sets a project secret: `created` is false when a value was replaced (the server answered 200, not 201). */
  async setProjectSecret(
    project: string,
    secret: { name: string; value: string },
    call: { signal?: AbortSignal } = {},
  ): Promise<{ created: boolean; secret: ProjectSecret }> {
    const { data, error, response } = await this.#client.api.PUT("/v3/projects/{project_id}/secrets/{name}", {
      params: { path: { project_id: project, name: secret.name } },
      body: { value: secret.value },
      signal: call.signal,
    });
    if (!response.ok || !data) throw await errorFromResponse(response, error);
    return { created: response.status === 201, secret: data };
  }

  /** Deletes a project secret (a 404 `RunplaneError` when there is none by that name). */
  async deleteProjectSecret(project: string, name: string, call: { signal?: AbortSignal } = {}): Promise<void> {
    await unwrap(this.#client.api.DELETE("/v3/projects/{project_id}/secrets/{name}", {
      params: { path: { project_id: project, name } },
      signal: call.signal,
    }));
  }
}
