import { errors as joseErrors, type JWTHeaderParameters, jwtVerify } from "jose";
import type { Kysely } from "kysely";
import { ProblemError } from "../problems/mod.ts";
import { createBatchedLookup } from "../store/mod.ts";
import type { Database } from "../store/schema.ts";
import { selectTokenStandings } from "../store/token_standing.ts";
import type { Scope } from "./scopes.ts";
import { TOKEN_ISSUER, touchServiceAccount } from "./service_accounts.ts";
import type { SigningKeys } from "./signing_key.ts";

/** How often an account's `last_used_at` is written at most. */
const USE_WRITE_INTERVAL_MS = 60_000;

/** Who is calling: the verified claims of a service-account token. */
export interface Principal {
  serviceAccountId: string;
  projectId: string;
  scopes: Scope[];
  tokenId: string;
  /** Unix seconds. */
  expiresAt: number;
}

/** Checks bearer tokens: signature, expiry, and that the service account is not revoked. */
export interface TokenVerifier {
  /** Returns the principal, or throws a 401 `ProblemError` saying what was wrong. */
  verify(token: string): Promise<Principal>;
}

const CACHE_LIMIT = 10_000;

function unauthorized(detail: string, description: string): ProblemError {
  return new ProblemError("unauthorized", detail, {
    headers: {
      "WWW-Authenticate": `Bearer realm="runplane", error="invalid_token", error_description="${description}"`,
    },
  });
}

/** A token whose `kid` names no key of this server. */
class UnknownKeyError extends Error {}

/**
 * Whether `token` is three segments of canonical base64url: no padding, and no set bits among a last
 * character's unused ones. jose decodes leniently, so without this one signature had many spellings
 * (`sig`, `sig=`, `sig` with a low bit of its last character changed), each a token of its own to
 * every cache or list keyed by the token's text.
 */
function isCanonicalCompactJws(token: string): boolean {
  const segments = token.split(".");
  if (segments.length !== 3) return false;
  return segments.every((segment) =>
    /^[A-Za-z0-9_-]*$/.test(segment) && Buffer.from(segment, "base64url").toString("base64url") === segment
  );
}

/**
 * Creates a verifier for tokens signed with one of `keys`, chosen by the `kid` of the token's header (a
 * token without one is checked against the current key). Signature checks are cached per token until it
 * expires; revocation is read from the store on every call, so `service-account revoke` takes effect at
 * once, even from another process. That read walks up the chain of accounts that minted the token (one
 * statement, `selectTokenStandings`): a token minted by a token revoked since, directly or further up,
 * is refused as revoked. Calls arriving together share that read (`createBatchedLookup`: each
 * call's answer still comes from a read that started after the call), so under load an authenticated
 * request costs a fraction of a statement, not one.
 */
export function createTokenVerifier(deps: { db: Kysely<Database>; keys: SigningKeys }): TokenVerifier {
  const verified = new Map<string, Principal>();
  const accounts = createBatchedLookup((tokenIds: string[]) => selectTokenStandings(deps.db, tokenIds));
  async function keyOf(header: JWTHeaderParameters): Promise<CryptoKey> {
    if (header.kid === undefined) return deps.keys.current.publicKey;
    const key = await deps.keys.find(header.kid);
    if (!key) throw new UnknownKeyError();
    return key.publicKey;
  }
  async function checkSignature(token: string): Promise<Principal> {
    const cached = verified.get(token);
    if (cached) return cached;
    try {
      if (!isCanonicalCompactJws(token)) throw new joseErrors.JWSInvalid("not canonical base64url");
      const { payload } = await jwtVerify(token, keyOf, {
        issuer: TOKEN_ISSUER,
        algorithms: ["EdDSA"],
        requiredClaims: ["sub", "jti", "exp", "project_id", "scope"],
      });
      const principal: Principal = {
        serviceAccountId: String(payload.sub),
        projectId: String(payload.project_id),
        scopes: String(payload.scope).split(" ").filter(Boolean) as Scope[],
        tokenId: String(payload.jti),
        expiresAt: Number(payload.exp),
      };
      if (verified.size >= CACHE_LIMIT) verified.delete(verified.keys().next().value as string);
      verified.set(token, principal);
      return principal;
    } catch (error) {
      if (error instanceof joseErrors.JWTExpired) {
        throw unauthorized("The token has expired: create a new one with `runplane service-account create`", "expired");
      }
      if (error instanceof joseErrors.JWSSignatureVerificationFailed || error instanceof UnknownKeyError) {
        throw unauthorized("The token's signature is not valid for this server", "bad signature");
      }
      throw unauthorized(
        "The token is malformed: send a service-account token as `Authorization: Bearer <token>`",
        "malformed",
      );
    }
  }
  // When each account's use was last written: `last_used_at` costs one write a minute per account,
  // made after the request is let through (a failed write only leaves the time older).
  const lastWritten = new Map<string, number>();
  function noteUse(id: string): void {
    const now = Date.now();
    if (now - (lastWritten.get(id) ?? 0) < USE_WRITE_INTERVAL_MS) return;
    lastWritten.delete(id);
    lastWritten.set(id, now);
    if (lastWritten.size > CACHE_LIMIT) lastWritten.delete(lastWritten.keys().next().value as string);
    touchServiceAccount(deps.db, { id, now }).catch(() => lastWritten.delete(id));
  }

  return {
    async verify(token) {
      const principal = await checkSignature(token);
      if (principal.expiresAt * 1000 <= Date.now()) {
        verified.delete(token);
        throw unauthorized("The token has expired: create a new one with `runplane service-account create`", "expired");
      }
      const account = await accounts.get(principal.tokenId);
      if (!account || account.revoked_at !== null || account.id !== principal.serviceAccountId) {
        throw unauthorized(
          "The token was revoked, or the token that minted it was: create a new one with `runplane service-account create`",
          "revoked",
        );
      }
      noteUse(principal.serviceAccountId);
      return principal;
    },
  };
}
