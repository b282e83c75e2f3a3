import { parseArgs } from "node:util";
import { assertRepoCoordinates, mirrorRepository } from "../../server/integrations/mod.ts";
import { dataDirOf, requireProjectId } from "./project_id.ts";
import { type CommandIo, UsageError } from "./usage.ts";

/** Help of `runplane repo`. */
export const REPO_HELP = `Usage:
  runplane repo add <path-or-url> --project <id> --as <owner>/<repo> [--data-dir <dir>]

Mirrors a git repository (every branch and tag) into the data dir's repos/<project_id>/<owner>/<repo>.git,
where the local provider serves its file tree. Works whether the server runs or not.`;

/** `runplane repo add`. */
export async function repoCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  if (sub !== "add") throw new UsageError(sub ? `Unknown subcommand "${sub}"` : "Name a subcommand: add");
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { project: { type: "string" }, as: { type: "string" }, "data-dir": { type: "string" } },
  });
  const projectId = requireProjectId(values.project, "repo add");
  const [source, extra] = positionals;
  if (!source || extra !== undefined) throw new UsageError("repo add needs exactly one <path-or-url>");
  const name = /^([^/]+)\/([^/]+)$/.exec(values.as ?? "");
  if (!name) throw new UsageError("repo add needs --as <owner>/<repo>, e.g. --as acme/widgets");
  try {
    assertRepoCoordinates({ owner: name[1], repo: name[2] });
  } catch (error) {
    throw new UsageError(`Invalid --as ${values.as}: ${(error as Error).message}`);
  }
  const path = await mirrorRepository(source, {
    dataDir: dataDirOf(values["data-dir"], io.env),
    projectId,
    owner: name[1],
    repo: name[2],
  });
  io.stdout.write(`${path}\n`);
  io.stderr.write(`Mirrored ${source} as ${name[1]}/${name[2]} in project ${projectId}\n`);
  return 0;
}
