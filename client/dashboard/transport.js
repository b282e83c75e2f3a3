// @ts-check
/**
 * The dashboard's `fetch`: a read that got no answer at all (the connection failed: a dropped keep-alive
 * socket, a server restarting, a moment's network trouble) is sent again, twice, after 0.3 s and 1 s.
 * Reads only (GET and HEAD change nothing, so a second try is safe), and only when nothing came back: an
 * answer, an error status included, is the server's word and goes to the page as it is. Without this, one
 * dropped connection left a page blank until it was reloaded.
 */

/** The waits before the second and the third try of a read. */
const RETRY_DELAYS_MS = [300, 1_000];

/**
 * Whether `error` says the request got no answer (fetch's TypeError), not that it was cancelled.
 *
 * @param {unknown} error
 */
function unanswered(error) {
  return error instanceof TypeError;
}

/**
 * `fetch(input, init)`, a read tried again when no answer came (see the module's comment).
 *
 * @param {RequestInfo | URL} input
 * @param {RequestInit} [init]
 * @returns {Promise<Response>}
 */
export async function fetchWithRetry(input, init) {
  const request = new Request(input, init);
  if (request.method !== "GET" && request.method !== "HEAD") return await fetch(request);
  for (const delay of RETRY_DELAYS_MS) {
    try {
      return await fetch(request.clone());
    } catch (error) {
      if (!unanswered(error) || request.signal.aborted) throw error;
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
  return await fetch(request);
}
