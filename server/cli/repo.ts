import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../../client/cli_command.ts";
import { assertRepoCoordinates, mirrorRepository, syncRepository } from "../integrations/mod.ts";
import { dataDirOf, requireProjectId } from "./_project_id.ts";

const REPO_OPTIONS = {
  project: { type: "string" },
  as: { type: "string" },
  "data-dir": { type: "string" },
} as const;

/** `<owner>/<repo>` split and checked against GitHub's naming rules; a `UsageError` naming `what` if not. */
function repoName(value: string | undefined, what: string): { owner: string; repo: string } {
  const name = /^([^/]+)\/([^/]+)$/.exec(value ?? "");
  if (!name) throw new UsageError(`${what} <owner>/<repo>, e.g. acme/widgets`);
  try {
    assertRepoCoordinates({ owner: name[1], repo: name[2] });
  } catch (error) {
    throw new UsageError(`Invalid repository name ${value}: ${(error as Error).message}`);
  }
  return { owner: name[1], repo: name[2] };
}

/** `runplane repo add|sync`. */
export async function repoCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  if (sub !== "add" && sub !== "sync") {
    throw new UsageError(sub ? `Unknown subcommand "${sub}": use add or sync` : "Name a subcommand: add or sync");
  }
  const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: REPO_OPTIONS });
  const projectId = requireProjectId(values.project, `repo ${sub}`);
  const dataDir = dataDirOf(values["data-dir"], io.env);
  if (sub === "sync") {
    if (values.as !== undefined) throw new UsageError("repo sync takes the name as its argument, not --as");
    if (positionals.length !== 1) throw new UsageError("repo sync needs exactly one <owner>/<repo>");
    const { owner, repo } = repoName(positionals[0], "repo sync needs");
    const outcome = await syncRepository({ dataDir, projectId, owner, repo });
    const head = outcome.head ? ` (${outcome.head.branch} at ${outcome.head.sha.slice(0, 7)})` : "";
    io.stdout.write(`${outcome.path}\n`);
    io.stderr.write(
      outcome.changed.length === 0
        ? `${owner}/${repo} in project ${projectId} is up to date with ${outcome.source}${head}\n`
        : `Synced ${owner}/${repo} in project ${projectId} from ${outcome.source}: ${
          outcome.changed.join(", ")
        } changed${head}\n`,
    );
    return 0;
  }
  const [source, extra] = positionals;
  if (!source || extra !== undefined) throw new UsageError("repo add needs exactly one <path-or-url>");
  const { owner, repo } = repoName(values.as, "repo add needs --as");
  const path = await mirrorRepository(source, { dataDir, projectId, owner, repo });
  io.stdout.write(`${path}\n`);
  io.stderr.write(`Mirrored ${source} as ${owner}/${repo} in project ${projectId}\n`);
  return 0;
}
