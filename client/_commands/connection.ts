import { createRunplaneClient, type RunplaneClient } from "../mod.ts";

/** Where a command sends its calls when no flag or variable says otherwise: `runplane serve`'s default. */
export const DEFAULT_URL = "http://127.0.0.1:8080";

/** The flags every client command takes (for `parseArgs`). */
export const CONNECTION_OPTIONS = {
  "base-url": { type: "string" },
  "api-url": { type: "string" },
  token: { type: "string" },
  json: { type: "boolean", default: false },
} as const;

/** Help lines describing `CONNECTION_OPTIONS`, appended to each command's help. */
export const CONNECTION_HELP = `Connection (flag, else variable, else default):
  --base-url <url>   RUNPLANE_BASE_URL  the REST API (default: --api-url, else ${DEFAULT_URL})
  --api-url <url>    RUNPLANE_API_URL   the run API (default: --base-url, else ${DEFAULT_URL})
  --token <jwt>      RUNPLANE_TOKEN     a service-account token (runplane service-account create)
  --json             print JSON for scripts (errors too, as the problem document)`;

/** The parsed connection flags. */
export interface ConnectionFlags {
  "base-url"?: string;
  "api-url"?: string;
  token?: string;
}

/**
 * A client configured from the flags, else `RUNPLANE_BASE_URL` (REST API), `RUNPLANE_API_URL` (run API),
 * `RUNPLANE_TOKEN`.
 */
export function connect(flags: ConnectionFlags, env: Record<string, string | undefined>): RunplaneClient {
  return createRunplaneClient({ ...serverUrls(flags, env), token: flags.token ?? env.RUNPLANE_TOKEN });
}

/** The REST API's and the run API's addresses the flags and variables name (each defaults to the other). */
export function serverUrls(
  flags: ConnectionFlags,
  env: Record<string, string | undefined>,
): { baseUrl: string; apiUrl: string } {
  const baseUrl = flags["base-url"] ?? env.RUNPLANE_BASE_URL;
  const apiUrl = flags["api-url"] ?? env.RUNPLANE_API_URL;
  return { baseUrl: baseUrl ?? apiUrl ?? DEFAULT_URL, apiUrl: apiUrl ?? baseUrl ?? DEFAULT_URL };
}
