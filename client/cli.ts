/**
 * `runplane`'s dispatcher and its commands that talk to a server (`client/_commands/`). The commands that
 * work on a data dir (serve, service-account, repo, integration) live beside the server, in
 * `server/cli/`, which adds them to this table and exports the whole CLI's `main`; this folder imports
 * nothing of the server. Exit codes: 0 success, 1 the run or request failed, 2 usage error.
 */
import { type CommandEntry, type CommandIo, UsageError } from "./cli_command.ts";

/** The commands that talk to a server; each module is imported only when its command runs. */
export const CLIENT_COMMANDS: Record<string, CommandEntry> = {
  init: {
    summary: "Write a new app (runplane.toml, main.py) into a folder",
    help: async () => (await import("./_commands/init.ts")).INIT_HELP,
    load: async () => (await import("./_commands/init.ts")).initCommand,
  },
  run: {
    summary: "Call an app's function (sync, async, stream)",
    help: async () => (await import("./_commands/run.ts")).RUN_HELP,
    load: async () => (await import("./_commands/run.ts")).runCommand,
    scopes: () => ["run"],
  },
  runs: {
    summary: "Get, list, cancel and rerun runs; follow their logs; redeliver their webhooks",
    help: async () => (await import("./_commands/runs.ts")).RUNS_HELP,
    load: async () => (await import("./_commands/runs.ts")).runsCommand,
    scopes: () => ["run"],
  },
  deploy: {
    summary: "Deploy an app folder or a repository folder, and follow its build",
    help: async () => (await import("./_commands/deploy.ts")).DEPLOY_HELP,
    load: async () => (await import("./_commands/deploy.ts")).deployCommand,
    scopes: () => ["deploy", "rest"],
  },
  deployments: {
    summary: "List and show deployments (the image each runs in), build logs, activate (roll back)",
    help: async () => (await import("./_commands/deployments.ts")).DEPLOYMENTS_HELP,
    load: async () => (await import("./_commands/deployments.ts")).deploymentsCommand,
    scopes: (args) => (args[0] === "activate" ? ["deploy"] : ["rest"]),
  },
  apps: {
    summary: "List, show and delete apps",
    help: async () => (await import("./_commands/apps.ts")).APPS_HELP,
    load: async () => (await import("./_commands/apps.ts")).appsCommand,
    scopes: (args) => (args[0] === "delete" ? ["deploy"] : ["rest"]),
  },
  secrets: {
    summary: "Set, list and delete a project's secrets (its replicas' environment)",
    help: async () => (await import("./_commands/secrets.ts")).SECRETS_HELP,
    load: async () => (await import("./_commands/secrets.ts")).secretsCommand,
    scopes: () => ["deploy"],
  },
  volumes: {
    summary: "Make, list and delete a project's volumes; copy files in and out (cp, ls)",
    help: async () => (await import("./_commands/volumes.ts")).VOLUMES_HELP,
    load: async () => (await import("./_commands/volumes.ts")).volumesCommand,
    scopes: (args) => {
      if (args[0] === "create" || args[0] === "delete") return ["deploy"];
      // An upload names the volume last: `cp <local> <project>:<name>/<path>`.
      if (args[0] === "cp" && /^[a-z0-9][a-z0-9-]*:[a-z]/.test(args.filter((a) => !a.startsWith("-")).at(-1) ?? "")) {
        return ["deploy"];
      }
      return ["rest"];
    },
  },
  "base-image": {
    summary: "Hash an app's build dependencies",
    help: async () => (await import("./_commands/base_image.ts")).BASE_IMAGE_HELP,
    load: async () => (await import("./_commands/base_image.ts")).baseImageCommand,
    scopes: () => ["rest"],
  },
  tree: {
    summary: "Show a repository's file tree",
    help: async () => (await import("./_commands/tree.ts")).TREE_HELP,
    load: async () => (await import("./_commands/tree.ts")).treeCommand,
    scopes: () => ["rest"],
  },
  logs: {
    summary: "Print every run's log lines of an app, interleaved with run ids; --follow for new ones",
    help: async () => (await import("./_commands/logs.ts")).LOGS_HELP,
    load: async () => (await import("./_commands/logs.ts")).logsCommand,
    scopes: () => ["rest"],
  },
  ws: {
    summary: "Open a WebSocket to a custom runtime's route: stdin lines out, messages to stdout",
    help: async () => (await import("./_commands/ws.ts")).WS_HELP,
    load: async () => (await import("./_commands/ws.ts")).wsCommand,
    scopes: () => ["run"],
  },
  webhook: {
    summary: "Verify a webhook delivery, or receive deliveries locally",
    help: async () => (await import("./_commands/webhook.ts")).WEBHOOK_HELP,
    load: async () => (await import("./_commands/webhook.ts")).webhookCommand,
  },
};

function mainHelp(commands: Record<string, CommandEntry>): string {
  const rows = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(18)} ${c.summary}`);
  return `Usage: runplane <command> [flags]\n\nCommands:\n${
    rows.join("\n")
  }\n\nRun runplane <command> --help for a command's flags.`;
}

/** Where the CLI writes and what it reads: the process's streams and environment unless a test says. */
export type CliIo = Omit<CommandIo, "args">;

/**
 * Runs `argv` (without node and script) against `commands`, listed in the help in their order, writing
 * to `io` (the process's streams and environment by default); resolves with the exit code. A usage error
 * prints the command's help (exit 2); any other failure one line on stderr, and the problem as JSON on
 * stdout with `--json` (exit 1).
 */
export async function dispatch(
  argv: string[],
  options: { commands: Record<string, CommandEntry>; io?: CliIo },
): Promise<number> {
  const { commands, io = { stdout: process.stdout, stderr: process.stderr, env: process.env } } = options;
  const [name, ...args] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    io.stdout.write(`${mainHelp(commands)}\n`);
    return name ? 0 : 2;
  }
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (!command) {
    io.stderr.write(`runplane: unknown command "${name}"\n\n${mainHelp(commands)}\n`);
    return 2;
  }
  if (args.includes("--help") || args.includes("-h")) {
    io.stdout.write(`${await command.help()}\n`);
    return 0;
  }
  try {
    const run = await command.load();
    return await run({ ...io, args });
  } catch (error) {
    if (error instanceof UsageError || isParseArgsError(error)) {
      io.stderr.write(`runplane ${name}: ${(error as Error).message}\n\n${await command.help()}\n`);
      return 2;
    }
    // Imported here, not above, so that `runplane --help` loads no client module.
    const { describeError, errorAsJson, writeJson } = await import("./_commands/output.ts");
    if (args.includes("--json")) writeJson(io, errorAsJson(error));
    const context = { command: name, needs: command.scopes?.(args) ?? [], token: tokenOf(args, io.env) };
    io.stderr.write(`runplane ${name}: ${describeError(error, context)}\n`);
    return 1;
  }
}

/** `util.parseArgs`'s errors (an unknown flag, a missing value): the command's usage, not a failure. */
function isParseArgsError(error: unknown): boolean {
  // Thrown values are anything: a DOMException's `code` is a number (an AbortError's is 20), or no object.
  const code = typeof error === "object" && error !== null ? (error as { code?: unknown }).code : undefined;
  return typeof code === "string" && code.startsWith("ERR_PARSE_ARGS");
}

/** The token a command sent, and from where: `--token`, else `RUNPLANE_TOKEN` (as `connect` reads them). */
function tokenOf(
  args: string[],
  env: Record<string, string | undefined>,
): { value: string; from: "--token" | "RUNPLANE_TOKEN" } | undefined {
  for (const [index, arg] of args.entries()) {
    if (arg === "--") break;
    if (arg === "--token" && args[index + 1] !== undefined) return { value: args[index + 1], from: "--token" };
    if (arg.startsWith("--token=")) return { value: arg.slice("--token=".length), from: "--token" };
  }
  return env.RUNPLANE_TOKEN ? { value: env.RUNPLANE_TOKEN, from: "RUNPLANE_TOKEN" } : undefined;
}
