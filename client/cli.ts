/**
 * `runplane`: the command-line client. Exit codes: 0 success, 1 the run or request failed, 2 usage
 * error.
 */
import { INTEGRATION_HELP, integrationCommand } from "./_commands/integration.ts";
import { REPO_HELP, repoCommand } from "./_commands/repo.ts";
import { BASE_IMAGE_HELP, baseImageCommand } from "./_commands/base_image.ts";
import { describeError, errorAsJson, writeJson } from "./_commands/output.ts";
import { RUN_HELP, runCommand } from "./_commands/run.ts";
import { RUNS_HELP, runsCommand } from "./_commands/runs.ts";
import { serveCommand, serveHelp } from "./_commands/serve.ts";
import { SERVICE_ACCOUNT_HELP, serviceAccountCommand } from "./_commands/service_account.ts";
import { TREE_HELP, treeCommand } from "./_commands/tree.ts";
import { type Command, type CommandIo, UsageError } from "./_commands/usage.ts";
import { WEBHOOK_HELP, webhookCommand } from "./_commands/webhook.ts";

const COMMANDS: Record<string, { run: Command; help: () => string; summary: string }> = {
  serve: { run: serveCommand, help: serveHelp, summary: "Run the server" },
  "service-account": {
    run: serviceAccountCommand,
    help: () => SERVICE_ACCOUNT_HELP,
    summary: "Create, list and revoke service-account tokens",
  },
  repo: {
    run: repoCommand,
    help: () => REPO_HELP,
    summary: "Mirror a git repository into a project's local repos, or update a mirror",
  },
  integration: {
    run: integrationCommand,
    help: () => INTEGRATION_HELP,
    summary: "Choose a project's repository provider: github or local",
  },
  run: { run: runCommand, help: () => RUN_HELP, summary: "Call an app's function (sync, async, stream)" },
  runs: { run: runsCommand, help: () => RUNS_HELP, summary: "Get, list and cancel runs" },
  "base-image": { run: baseImageCommand, help: () => BASE_IMAGE_HELP, summary: "Hash an app's build dependencies" },
  tree: { run: treeCommand, help: () => TREE_HELP, summary: "Show a repository's file tree" },
  webhook: {
    run: webhookCommand,
    help: () => WEBHOOK_HELP,
    summary: "Verify a webhook delivery, or receive deliveries locally",
  },
};

function mainHelp(): string {
  const rows = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(18)} ${c.summary}`);
  return `Usage: runplane <command> [flags]\n\nCommands:\n${
    rows.join("\n")
  }\n\nRun runplane <command> --help for a command's flags.`;
}

/** Runs the CLI with `argv` (without node and script); resolves with the exit code. */
export async function main(argv: string[], io: Omit<CommandIo, "args"> = {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
}): Promise<number> {
  const [name, ...args] = argv;
  if (!name || name === "--help" || name === "-h" || name === "help") {
    io.stdout.write(`${mainHelp()}\n`);
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    io.stderr.write(`runplane: unknown command "${name}"\n\n${mainHelp()}\n`);
    return 2;
  }
  if (args.includes("--help") || args.includes("-h")) {
    io.stdout.write(`${command.help()}\n`);
    return 0;
  }
  try {
    return await command.run({ ...io, args });
  } catch (error) {
    if (error instanceof UsageError || (error as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")) {
      io.stderr.write(`runplane ${name}: ${(error as Error).message}\n\n${command.help()}\n`);
      return 2;
    }
    if (args.includes("--json")) writeJson(io, errorAsJson(error));
    io.stderr.write(`runplane ${name}: ${describeError(error)}\n`);
    return 1;
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await main(process.argv.slice(2));
}
