import {
  createServiceAccount,
  listServiceAccounts,
  mintingGrant,
  revokeServiceAccount,
  type Scope,
  type ServiceAccount,
} from "../auth/mod.ts";
import type { ServerContext } from "../context.ts";
import type { Handlers } from "../http/mod.ts";
import { ProblemError } from "../problems/mod.ts";

type ServiceAccountHandlers = Pick<Handlers, "createServiceAccount" | "listServiceAccounts" | "revokeServiceAccount">;

function view(account: ServiceAccount) {
  return {
    service_account_id: account.id,
    project_id: account.projectId,
    name: account.name,
    scopes: account.scopes,
    created_at: account.createdAt.toISOString(),
    expires_at: account.expiresAt.toISOString(),
    last_used_at: account.lastUsedAt?.toISOString() ?? null,
    revoked_at: account.revokedAt?.toISOString() ?? null,
  };
}

/** Service accounts over REST (the `admin` scope): mint within the caller's bounds, list, revoke. */
export function serviceAccountHandlers(context: ServerContext): ServiceAccountHandlers {
  const { db } = context.store;
  return {
    async createServiceAccount({ path, body, principal }) {
      // The body is required by the contract (a missing one is a 400 before this runs).
      const request = body!;
      const grant = mintingGrant(principal!, {
        scopes: request.scopes as Scope[],
        expiresAt: request.expires_at === undefined ? undefined : Date.parse(request.expires_at),
        now: Date.now(),
      });
      const { account, token } = await createServiceAccount({ db, key: context.key }, {
        projectId: path.project_id,
        name: request.name,
        ...grant,
        parentId: principal!.serviceAccountId,
      });
      context.logger.info({ service_account_id: account.id, scopes: account.scopes }, "service account created");
      return { status: 201, contentType: "application/json", body: { ...view(account), token } };
    },
    async listServiceAccounts({ path }) {
      const accounts = await listServiceAccounts(db, path.project_id);
      return { status: 200, contentType: "application/json", body: { service_accounts: accounts.map(view) } };
    },
    async revokeServiceAccount({ path }) {
      if (!(await revokeServiceAccount(db, path.service_account_id, { projectId: path.project_id }))) {
        throw new ProblemError(
          "not-found",
          `Project ${path.project_id} has no service account ${path.service_account_id}`,
        );
      }
      context.logger.info({ service_account_id: path.service_account_id }, "service account revoked");
      return { status: 204 };
    },
  };
}
