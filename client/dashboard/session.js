// @ts-check
/**
 * The signed-in session, as the server tells it (`/dashboard/session`). The token itself never reaches
 * the page: the server keeps it sealed in an HttpOnly cookie.
 */
import { fetchWithRetry } from "./transport.js";

/** @typedef {import("./types.js").Session} Session */

/** @type {Session | null | undefined} undefined: not asked yet */
let current;

/** The session, or null when signed out (after `loadSession`). */
export function session() {
  return current ?? null;
}

/**
 * The session of a page that needs one (the shell shows those pages only when signed in).
 *
 * @returns {Session}
 */
export function requireSession() {
  if (!current) throw new Error("Sign in first");
  return current;
}

/**
 * Asks the server who is signed in, once; resolves with the session or null. Rejects when the server
 * could not be reached (after `fetchWithRetry`'s tries), and asks again at the next call.
 */
export async function loadSession() {
  if (current !== undefined) return current;
  const response = await fetchWithRetry("/dashboard/session");
  current = response.ok ? /** @type {Session} */ (await response.json()) : null;
  return current;
}

/** Forgets the session here (the server ended it, or said the token no longer works). */
export function forgetSession() {
  current = null;
}

/**
 * Signs in with a service-account token; resolves with the session, or rejects with the server's reason.
 *
 * @param {string} token
 */
export async function signIn(token) {
  const response = await fetch("/dashboard/session", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token }),
  });
  if (!response.ok) {
    const problem = /** @type {{ detail?: string } | null} */ (await response.json().catch(() => null));
    throw new Error(problem?.detail ?? "Sign-in failed");
  }
  current = /** @type {Session} */ (await response.json());
  return current;
}

/** Ends the session on the server (every copy of its cookie stops working) and here. */
export async function signOut() {
  await fetch("/dashboard/session/end", { method: "POST" });
  current = null;
}
