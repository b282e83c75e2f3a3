/**
 * The help texts of the commands that work on a data dir. They live apart from the commands so that
 * `runplane <command> --help` loads only the settings table and the GitHub default, not the server.
 */
import { SETTINGS } from "../config.ts";
import { GITHUB_API_URL } from "../integrations/mod.ts";

/** Help of `runplane serve`, listing every setting with its variable and default. */
export function serveHelp(): string {
  const rows = SETTINGS.map((s) =>
    `  ${s.flag.padEnd(18)} ${s.env.padEnd(32)} ${s.description} (default: ${s.default})`
  );
  return `Usage: runplane serve [flags]\n\nEvery setting comes from its flag, else its environment variable, else its default:\n\n${
    rows.join("\n")
  }`;
}

/** Help of `runplane token`. */
export const TOKEN_HELP = `Usage:
  runplane token create [--data-dir <dir>] [--project p-demo] [--name <name>] [--expires 30d]
                        [--scope admin,deploy,rest,run] [--database-url <postgres://…>] [--json]

Mints a service-account token from the data dir (--data-dir, or RUNPLANE_DATA_DIR, default ./.runplane:
the folder the server was started with), whether the server runs or not: the way to a first token, and to
a new one when the token npm start printed is lost. Defaults: project p-demo (the demo project npm start
makes), every scope, 30 days. Prints only the token on stdout, so

  export RUNPLANE_TOKEN=$(runplane token create --data-dir /path/to/.runplane)

sets it. A shorthand of runplane service-account create (see its help for PostgreSQL stores, which need
RUNPLANE_MASTER_KEY too); runplane service-account revoke <id> revokes a token.`;

/** Help of `runplane service-account`. */
export const SERVICE_ACCOUNT_HELP = `Usage:
  runplane service-account create --project <id> --name <name> [--expires <ISO date | 30d>] [--scope rest,run]
  runplane service-account list --project <id> [--json]
  runplane service-account revoke <service-account-id> [--project <id>]

Scopes: run (the run API), rest (read the REST API), deploy (deploy apps), admin (manage tokens).

Against a running server (--base-url, or RUNPLANE_BASE_URL) it uses the REST API with a token that has
the admin scope (--token, or RUNPLANE_TOKEN): a new token never has scopes or a lifetime beyond that
token's (default expiry: 90 days, or the caller's if sooner); list shows when each token was last used;
revoke needs --project.

Otherwise it works on the data dir (--data-dir, or RUNPLANE_DATA_DIR, default ./.runplane), whether the
server runs or not, and --expires is required; that folder must exist (the server makes it when it first
starts): it is never created here, since a token minted into a new data dir is one no server accepts; with --database-url (or RUNPLANE_DATABASE_URL) on the store
in that PostgreSQL database. That is how the first token is made. create prints only the token on stdout;
it is shown once and never stored. A new project is created. create against a database signs with the key
kept in it, so it needs RUNPLANE_MASTER_KEY: the master key the server processes are given (never a flag:
it would show in the process list).`;

/** Help of `runplane repo`. */
export const REPO_HELP = `Usage:
  runplane repo add <path-or-url> --project <id> --as <owner>/<repo> [--data-dir <dir>]
  runplane repo sync <owner>/<repo> --project <id> [--data-dir <dir>]

add mirrors a git repository (every branch and tag) into the data dir's
repos/<project_id>/<owner>/<repo>.git, where the local provider serves its file tree; the mirror is a
snapshot. sync fetches the source's new commits, branches and tags into an existing mirror (refs gone
from the source go too), so tree shows them at once. Both work whether the server runs or not.`;

/** Help of `runplane integration`. */
export const INTEGRATION_HELP = `Usage:
  runplane integration github --project <id> --token <token | -> [--github-api-url <url>] [--data-dir <dir>]
                              [--database-url <postgres://…>]
  runplane integration local --project <id> [--data-dir <dir>] [--database-url <postgres://…>]

github makes the project read repository trees from GitHub with the token (--token - reads it from
stdin); the token is stored encrypted and never shown again. For GitHub Enterprise Server pass
--github-api-url https://<host>/api/v3 (default ${GITHUB_API_URL}). local switches back to the data
dir's repos folder (see runplane repo add). With --database-url (or RUNPLANE_DATABASE_URL) the setting is
stored in that PostgreSQL database instead of the data dir's SQLite file; the token is then sealed with
the database's data key, so RUNPLANE_MASTER_KEY must be the master key the server processes are given.`;
