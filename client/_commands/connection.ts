import { UsageError } from "../cli_command.ts";
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

/**
 * The project of the token the flags or `RUNPLANE_TOKEN` give: its `project_id` claim, read without
 * verifying the signature (the server verifies it on every call, and answers 403 for another project).
 * Undefined without a token, or for one that is no JWT with that claim.
 */
export function tokenProject(flags: ConnectionFlags, env: Record<string, string | undefined>): string | undefined {
  const token = flags.token ?? env.RUNPLANE_TOKEN;
  const payload = token?.split(".")[1];
  if (!payload) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { project_id?: unknown };
    return typeof claims.project_id === "string" && /^[a-z0-9][a-z0-9-]{0,62}$/.test(claims.project_id)
      ? claims.project_id
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The project a command works on: `explicit` (`--project`, or the one its target names), else the token's;
 * a `UsageError` for `command` when neither says.
 */
export function projectFor(
  explicit: string | undefined,
  options: { flags: ConnectionFlags; env: Record<string, string | undefined>; command: string },
): string {
  const project = explicit ?? tokenProject(options.flags, options.env);
  if (project) return project;
  throw new UsageError(
    `${options.command} needs a project (--project <id>, or in its target), or a token (--token or RUNPLANE_TOKEN), whose project is the default`,
  );
}

/**
 * `<project>/<app>` as written, or `<app>` alone completed with the token's project; a `UsageError`
 * naming `usage` when it is neither, or names no project and the token none.
 */
export function appTarget(
  target: string | undefined,
  options: { flags: ConnectionFlags; env: Record<string, string | undefined>; usage: string },
): string {
  if (target && /^[^/]+\/[^/]+$/.test(target)) return target;
  if (!target || target.includes("/")) throw new UsageError(options.usage);
  const project = tokenProject(options.flags, options.env);
  if (!project) throw new UsageError(`${options.usage} (<app> alone needs a token, whose project it is in)`);
  return `${project}/${target}`;
}
