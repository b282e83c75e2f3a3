/** The scopes a service-account token can carry. */
export const SCOPES = ["admin", "deploy", "rest", "run"] as const;

/** A token scope: `run` the run API, `rest` reading the REST API, `deploy` deploying, `admin` managing tokens. */
export type Scope = (typeof SCOPES)[number];

/** Parses `rest,run` (or space-separated) into scopes; throws naming an unknown one. */
export function parseScopes(text: string): Scope[] {
  const parts = text.split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) {
    throw new Error(`Scope list is empty: use one or more of ${SCOPES.join(", ")}, e.g. rest,run`);
  }
  for (const part of parts) {
    if (!(SCOPES as readonly string[]).includes(part)) {
      throw new Error(`Unknown scope "${part}": use one or more of ${SCOPES.join(", ")}, e.g. rest,run`);
    }
  }
  return [...new Set(parts as Scope[])].sort();
}
