/**
 * The webhook retry table, exactly as documented: network error or timeout → retry; 404 → retry; any
 * other 4xx → permanent; any 5xx → permanent (a retry could repeat side effects); any other non-2xx
 * (3xx: redirects are never followed) → retry; 2xx → delivered. Three attempts in total.
 */

/** Attempts a delivery gets in total. */
export const MAX_ATTEMPTS = 3;

/** How one attempt ended: a status code, or an error (`refused` when the guard stopped it). */
export type AttemptOutcome =
  | { statusCode: number }
  | { error: string; refused?: boolean };

/** What follows an attempt. */
export type AttemptVerdict = "delivered" | "retry" | "permanent";

/** Applies the retry table to one attempt's outcome. */
export function judgeAttempt(outcome: AttemptOutcome): AttemptVerdict {
  if ("error" in outcome) return outcome.refused ? "permanent" : "retry";
  const code = outcome.statusCode;
  if (code >= 200 && code < 300) return "delivered";
  if (code === 404) return "retry";
  if (code >= 400 && code < 600) return "permanent";
  return "retry";
}
