import type { RouteSpec } from "../../generated/routes.ts";
import type { Principal, TokenVerifier } from "../auth/mod.ts";
import { ProblemError } from "../problems/mod.ts";

const CHALLENGE = { "WWW-Authenticate": 'Bearer realm="runplane"' };

/**
 * Authenticates a call to `route` from its `Authorization` header value: 401 without a valid token,
 * 403 when the token is for another project or lacks the route's scope.
 */
export async function authenticate(
  verifier: TokenVerifier,
  call: { route: RouteSpec; authorization: string | undefined; projectId: string | undefined },
): Promise<Principal> {
  const match = /^Bearer[ ]+([A-Za-z0-9._~+/-]+=*)\s*$/i.exec(call.authorization ?? "");
  if (!call.authorization) {
    throw new ProblemError("unauthorized", "Send a service-account token as `Authorization: Bearer <token>`", {
      headers: CHALLENGE,
    });
  }
  if (!match) {
    throw new ProblemError("unauthorized", "The Authorization header must be `Bearer <token>`", {
      headers: { "WWW-Authenticate": 'Bearer realm="runplane", error="invalid_request"' },
    });
  }
  const principal = await verifier.verify(match[1]);
  if (call.projectId !== undefined && call.projectId !== principal.projectId) {
    throw new ProblemError("forbidden", `This token belongs to project ${principal.projectId}, not ${call.projectId}`);
  }
  if (call.route.scope && !principal.scopes.includes(call.route.scope as Principal["scopes"][number])) {
    throw new ProblemError(
      "forbidden",
      `This token lacks the "${call.route.scope}" scope: create one with --scope ${call.route.scope}`,
    );
  }
  return principal;
}
