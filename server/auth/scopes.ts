/** The scopes a service-account token can carry. */
export const SCOPES = ["deploy", "rest", "run"] as const;

/** A token scope: `rest` for the REST API, `run` for the run API. */
export type Scope = (typeof SCOPES)[number];

/** Parses `rest,run` (or space-separated) into scopes; throws naming an unknown one. */
export function parseScopes(text: string): Scope[] {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) throw new Error("Scope list is empty: use rest, run or rest,run");
  for (const part of parts) {
    if (!(SCOPES as readonly string[]).includes(part)) {
      throw new Error(`Unknown scope "${part}": use rest, run or rest,run`);
    }
  }
  return [...new Set(parts as Scope[])].sort();
}
