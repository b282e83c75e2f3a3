/**
 * The rule for tokens minted over the API: a token never mints one that can do more, or live longer,
 * than itself.
 */
import { ProblemError } from "../problems/mod.ts";
import type { Scope } from "./scopes.ts";
import type { Principal } from "./token_verifier.ts";

/** A minted token's lifetime when the request names none: 90 days (or the caller's, if it ends sooner). */
export const DEFAULT_TOKEN_LIFETIME_MS = 90 * 86_400_000;

/**
 * The scopes and expiry (Unix ms) of a token `caller` asks to mint; throws a 403 problem naming the
 * scope or the date beyond the caller's own, and a 400 one for an expiry in the past.
 */
export function mintingGrant(
  caller: Principal,
  request: { scopes: Scope[]; expiresAt?: number; now: number },
): { scopes: Scope[]; expiresAt: number } {
  const beyond = request.scopes.filter((scope) => !caller.scopes.includes(scope));
  if (beyond.length) {
    throw new ProblemError(
      "forbidden",
      `A token cannot mint a token with scopes it lacks itself (${beyond.join(", ")}); this token has ${
        caller.scopes.join(", ")
      }`,
    );
  }
  const callerExpiry = caller.expiresAt * 1000;
  const expiresAt = request.expiresAt ?? Math.min(request.now + DEFAULT_TOKEN_LIFETIME_MS, callerExpiry);
  if (expiresAt <= request.now) {
    throw new ProblemError("validation", "expires_at is in the past: choose a later time", {
      errors: [{ path: "body.expires_at", message: "must be in the future" }],
    });
  }
  if (expiresAt > callerExpiry) {
    throw new ProblemError(
      "forbidden",
      `A token cannot mint a token that outlives it: expires_at must be at most ${
        new Date(callerExpiry).toISOString()
      }`,
    );
  }
  return { scopes: [...new Set(request.scopes)].sort(), expiresAt };
}
