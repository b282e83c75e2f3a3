import { parseArgs } from "node:util";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect, projectFor } from "./connection.ts";
import { writeJson } from "./output.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";
import { formatTree } from "../tree_format.ts";

/** Help of `runplane tree`. */
export const TREE_HELP = `Usage: runplane tree <owner>/<repo> [--project <id>] [--ref <branch|tag|sha>]

Prints a repository's file tree (the default branch unless --ref) as an indented view; --json prints
the server's answer as it is.

${CONNECTION_HELP}`;

/** `runplane tree`: prints a repository's tree. */
export async function treeCommand(io: CommandIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: io.args,
    allowPositionals: true,
    options: { ...CONNECTION_OPTIONS, project: { type: "string" }, ref: { type: "string" } },
  });
  const repository = positionals[0];
  if (!repository || positionals.length > 1 || !/^[^/]+\/[^/]+$/.test(repository)) {
    throw new UsageError("tree needs one <owner>/<repo>");
  }
  const project = projectFor(values.project, { flags: values, env: io.env, command: "tree" });
  const answer = await connect(values, io.env).repositoryTree(project, repository, { ref: values.ref });
  if (answer.notModified) return 0;
  if (values.json) writeJson(io, answer.tree);
  else io.stdout.write(`${formatTree(answer.tree)}\n`);
  return 0;
}
