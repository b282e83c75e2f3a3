/**
 * What to do about a 401 or a 403 from the server, in the CLI's words: which token was used (the
 * `--token` flag or `RUNPLANE_TOKEN`), and every scope the command needs that the token lacks. The server
 * checks one operation's one scope per call, so a command that makes calls of several scopes (`deploy`
 * reads with `rest` and deploys with `deploy`) would otherwise be refused one scope at a time.
 */
import type { RunplaneError } from "../mod.ts";

/** Who is asking: the command, the scopes its calls need, and the token it sent and where it came from. */
export interface AuthContext {
  command: string;
  /** The scopes of every call the command makes (the dispatcher's table says). */
  needs: string[];
  token: { value: string; from: "--token" | "RUNPLANE_TOKEN" } | undefined;
}

/**
 * The scopes a token says it has (its `scope` claim), read without verifying it: only to word a refusal
 * the server already made. Null when the token is not a JWT this can read.
 */
export function tokenScopes(token: string): string[] | null {
  try {
    const payload = JSON.parse(Buffer.from(token.split(".")[1] ?? "", "base64url").toString("utf8")) as {
      scope?: unknown;
    };
    return typeof payload.scope === "string" ? payload.scope.split(" ").filter(Boolean) : null;
  } catch {
    return null;
  }
}

/** `"a"`, `"a" and "b"`, `"a", "b" and "c"`. */
function words(list: string[]): string {
  const quoted = list.map((word) => `"${word}"`);
  return quoted.length <= 1 ? quoted.join("") : `${quoted.slice(0, -1).join(", ")} and ${quoted.at(-1)}`;
}

/** The sentence for a 401 or 403 `error`; undefined for any other error (the problem says it all). */
export function authHint(error: RunplaneError, context: AuthContext): string | undefined {
  const detail = error.problem.detail ? `: ${error.problem.detail}` : "";
  const { token } = context;
  if (error.status === 401) {
    if (!token) {
      return `${error.problem.title}: no token was given: set RUNPLANE_TOKEN or pass --token <token> (npm start prints one on a fresh data dir; runplane service-account create makes more)`;
    }
    return `${error.problem.title}${detail}: the token in ${token.from} was refused; set ${token.from} to a valid token (runplane service-account create makes one)`;
  }
  if (error.status !== 403) return undefined;
  const lacking = /lacks the "(\w+)" scope/.exec(error.problem.detail ?? "");
  if (!lacking) return `${error.problem.title}${detail} (the token in ${token?.from ?? "RUNPLANE_TOKEN"})`;
  const has = token ? tokenScopes(token.value) : null;
  const missing = has ? context.needs.filter((scope) => !has.includes(scope)) : [lacking[1]];
  if (!missing.includes(lacking[1])) missing.push(lacking[1]);
  const wanted = [...new Set([...(has ?? []), ...context.needs, lacking[1]])].sort();
  const plural = missing.length > 1 ? "scopes" : "scope";
  return `${error.problem.title}: the token in ${token?.from ?? "RUNPLANE_TOKEN"} lacks the ${
    words(missing.sort())
  } ${plural} that runplane ${context.command} needs${
    has ? ` (it has ${words(has) || "none"})` : ""
  }: use a token made with --scope ${wanted.join(",")} (runplane service-account create)`;
}
