// @ts-check
/**
 * The dashboard's one way to the server: the generated client's transport (`openapi-fetch`) typed by the
 * contract's `paths`, authenticated by the session cookie. It calls only the public REST and run APIs, so
 * what the dashboard shows and does, a token can with curl.
 */
import createClient from "openapi-fetch";
import { go } from "./navigation.js";
import { forgetSession } from "./session.js";
import { fetchWithRetry } from "./transport.js";

/** @typedef {import("./types.js").Paths} Paths */
/** @typedef {import("./types.js").Problem} Problem */

/** The typed client of this server's APIs. */
export const api = /** @type {typeof createClient<Paths>} */ (createClient)({
  baseUrl: location.origin,
  credentials: "same-origin",
  fetch: fetchWithRetry,
});

/** Thrown when the server said the session is over: the page has already gone to sign-in. */
export class SignedOut extends Error {
  constructor() {
    super("Signed out");
    this.name = "SignedOut";
  }
}

/**
 * Whether `value` is a problem document (RFC 9457), as every refusal of the server is.
 *
 * @param {unknown} value
 * @returns {value is Problem}
 */
export function isProblem(value) {
  return typeof value === "object" && value !== null && "title" in value && "status" in value;
}

/**
 * What went wrong, in a sentence: a problem's title and detail, or what the status says.
 *
 * @param {unknown} error the response's body, when it was one
 * @param {Response | undefined} response
 */
export function problemText(error, response) {
  if (response?.status === 401) return "Your session ended or its token was revoked: sign in again.";
  if (isProblem(error)) return `${error.title}${error.detail ? `: ${error.detail}` : ""}`;
  return `The server answered ${response?.status ?? "nothing"}; check that it runs and try again.`;
}

/**
 * An openapi-fetch answer's data; a refusal becomes an error with the problem's text, and a 401 signs the
 * page out (to the sign-in page) before it throws `SignedOut`.
 *
 * @template T
 * @param {Promise<{ data?: T; error?: unknown; response: Response }>} answer
 * @returns {Promise<T>}
 */
export async function call(answer) {
  const { data, error, response } = await answer;
  if (response.status === 401) {
    forgetSession();
    go("/dashboard/signin", { replace: true });
    throw new SignedOut();
  }
  if (!response.ok) throw new Error(problemText(error, response));
  return /** @type {T} */ (data);
}
