import type { RouteSpec } from "../../generated/routes.ts";
import type { Principal, TokenVerifier } from "../auth/mod.ts";
import { ProblemError } from "../problems/mod.ts";

const CHALLENGE = { "WWW-Authenticate": 'Bearer realm="runplane"' };

// The last header's token. A client sends the same header call after call: comparing it with the last
// one costs ~0.1 µs where the pattern below takes ~1 µs on a token's ~350 characters, and the token is
// then the same string as the last call's, whose hash the verifier's cache of checked signatures has
// already computed (a new string is hashed whole at every lookup).
let lastHeader = "";
let lastToken = "";

/** The token of an `Authorization: Bearer <token>` header; a 401 for any other header. */
function bearerToken(authorization: string): string {
  if (authorization === lastHeader) return lastToken;
  const match = /^Bearer[ ]+([A-Za-z0-9._~+/-]+=*)\s*$/i.exec(authorization);
  if (!match) {
    throw new ProblemError("unauthorized", "The Authorization header must be `Bearer <token>`", {
      headers: { "WWW-Authenticate": 'Bearer realm="runplane", error="invalid_request"' },
    });
  }
  lastHeader = authorization;
  lastToken = match[1];
  return lastToken;
}

/**
 * Authenticates a call to `route` from its `Authorization` header value: 401 without a valid token,
 * 403 when the token is for another project or lacks the route's scope.
 */
export async function authenticate(
  verifier: TokenVerifier,
  call: { route: RouteSpec; authorization: string | undefined; projectId: string | undefined },
): Promise<Principal> {
  if (!call.authorization) {
    throw new ProblemError("unauthorized", "Send a service-account token as `Authorization: Bearer <token>`", {
      headers: CHALLENGE,
    });
  }
  const principal = await verifier.verify(bearerToken(call.authorization));
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
