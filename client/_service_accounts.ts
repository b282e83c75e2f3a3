/** A project's service accounts on the REST API: minting one (its token shown once), listing, revoking. */
import { type ClientContext, unwrap } from "./_client_context.ts";
import type { CreatedServiceAccount, ServiceAccount, ServiceAccountRequest } from "./types.ts";

/** The service-account calls of a client. */
export class ServiceAccounts {
  readonly #client: ClientContext;

  /** Calls over `client`'s REST API. */
  constructor(client: ClientContext) {
    this.#client = client;
  }

  /** Mints a token (the `admin` scope; never beyond the caller's scopes or lifetime). */
  createServiceAccount(
    project: string,
    request: ServiceAccountRequest,
    call: { signal?: AbortSignal } = {},
  ): Promise<CreatedServiceAccount> {
    return unwrap(this.#client.api.POST("/v3/projects/{project_id}/service-accounts", {
      params: { path: { project_id: project } },
      body: request,
      signal: call.signal,
    }));
  }

  /** The project's service accounts, oldest first, with when each was last used. */
  async listServiceAccounts(project: string, call: { signal?: AbortSignal } = {}): Promise<ServiceAccount[]> {
    const list = await unwrap(this.#client.api.GET("/v3/projects/{project_id}/service-accounts", {
      params: { path: { project_id: project } },
      signal: call.signal,
    }));
    return list.service_accounts;
  }

  /** Revokes a service account: its token is refused from the next request on. */
  async revokeServiceAccount(
    project: string,
    serviceAccountId: string,
    call: { signal?: AbortSignal } = {},
  ): Promise<void> {
    await unwrap(this.#client.api.DELETE("/v3/projects/{project_id}/service-accounts/{service_account_id}", {
      params: { path: { project_id: project, service_account_id: serviceAccountId } },
      signal: call.signal,
    }));
  }
}
