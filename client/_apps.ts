/** A project's apps on the REST API: listing them, reading one, deleting a deployed one. */
import { type ClientContext, unwrap } from "./_client_context.ts";
import { appPath } from "./_paths.ts";
import type { AppRef } from "./app_ref.ts";
import type { App } from "./types.ts";

/** The app calls of a client. */
export class Apps {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** The project's apps: from the apps folder and deployed. */
  async listApps(project: string, call: { signal?: AbortSignal } = {}): Promise<App[]> {
    const page = await unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps", {
      params: { path: { project_id: project } },
      signal: call.signal,
    }));
    return page.apps;
  }

  /** One app: where it comes from, its state, scaling and replicas. */
  getApp(app: AppRef, call: { signal?: AbortSignal } = {}): Promise<App> {
    return unwrap(this.#client.api.GET("/v3/projects/{project_id}/apps/{app_id}", {
      params: { path: appPath(app) },
      signal: call.signal,
    }));
  }

  /** Deletes a deployed app: new calls answer 404, calls in flight finish. */
  async deleteApp(app: AppRef, call: { signal?: AbortSignal } = {}): Promise<void> {
    await unwrap(this.#client.api.DELETE("/v3/projects/{project_id}/apps/{app_id}", {
      params: { path: appPath(app) },
      signal: call.signal,
    }));
  }
}
