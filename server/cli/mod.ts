/**
 * The whole `runplane` CLI: the client's dispatcher (`client/cli.ts`) with the commands that work on a
 * data dir or its database added — serve, token, service-account, repo, integration. They live here, beside the
 * server they load; this module loads none of them (nor their help) until one is invoked, so the
 * commands that talk to a server start without loading the server. `client/runplane.mjs` runs `main`.
 */
import { CLIENT_COMMANDS, type CliIo, dispatch } from "../../client/cli.ts";
import type { CommandEntry } from "../../client/cli_command.ts";

/** The commands that work on a data dir, in the order the help lists them (before the client's). */
export const SERVER_COMMANDS: Record<string, CommandEntry> = {
  serve: {
    summary: "Run the server",
    help: async () => (await import("./help.ts")).serveHelp(),
    load: async () => (await import("./serve.ts")).serveCommand,
  },
  token: {
    summary: "Mint a token from the data dir (default: project p-demo, every scope, 30 days)",
    help: async () => (await import("./help.ts")).TOKEN_HELP,
    load: async () => (await import("./token.ts")).tokenCommand,
  },
  "service-account": {
    summary: "Create, list and revoke service-account tokens",
    help: async () => (await import("./help.ts")).SERVICE_ACCOUNT_HELP,
    load: async () => (await import("./service_account.ts")).serviceAccountCommand,
    // Over the REST API (with --base-url); on a data dir it sends no call.
    scopes: () => ["admin"],
  },
  repo: {
    summary: "Mirror a git repository into a project's local repos, or update a mirror",
    help: async () => (await import("./help.ts")).REPO_HELP,
    load: async () => (await import("./repo.ts")).repoCommand,
  },
  integration: {
    summary: "Choose a project's repository provider: github or local",
    help: async () => (await import("./help.ts")).INTEGRATION_HELP,
    load: async () => (await import("./integration.ts")).integrationCommand,
  },
};

const COMMANDS = { ...SERVER_COMMANDS, ...CLIENT_COMMANDS };

/**
 * Runs the CLI with `argv` (without node and script) and resolves with the exit code; writes to `io`
 * (the process's streams and environment by default), so tests run it in-process.
 */
export function main(argv: string[], io?: CliIo): Promise<number> {
  return dispatch(argv, { commands: COMMANDS, io });
}
