/**
 * `runplane token create`: the one command that mints a token from the data dir (or the database), with a
 * newcomer's defaults: the demo project, every scope, 30 days. A shorthand of `service-account create`.
 */
import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../../client/cli_command.ts";
import { dataDirOf } from "./_project_id.ts";
import { serviceAccountCommand } from "./service_account.ts";

/** The demo project `npm start` makes (`DEMO_PROJECT` of server/main.ts, not imported: it loads the server). */
const DEMO_PROJECT = "p-demo";

/** `runplane token create [--data-dir <dir>] [--project <id>] [--name <name>] [--expires 30d] [--scope …]`. */
export async function tokenCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  if (sub !== "create") {
    throw new UsageError(sub ? `Unknown subcommand "${sub}": use create` : "Name a subcommand: create");
  }
  const { values } = parseArgs({
    args: rest,
    options: {
      project: { type: "string", default: DEMO_PROJECT },
      name: { type: "string" },
      expires: { type: "string", default: "30d" },
      scope: { type: "string", default: "admin,deploy,rest,run" },
      "data-dir": { type: "string" },
      "database-url": { type: "string" },
      json: { type: "boolean", default: false },
    },
  });
  const databaseUrl = values["database-url"] ?? io.env.RUNPLANE_DATABASE_URL;
  const args = [
    "create",
    "--project",
    values.project,
    "--name",
    values.name ?? `cli-${new Date().toISOString().slice(0, 10)}`,
    "--expires",
    values.expires,
    "--scope",
    values.scope,
    // Always the data dir (or database), never a server's REST API, whatever RUNPLANE_BASE_URL says.
    "--data-dir",
    dataDirOf(values["data-dir"], io.env),
    ...(databaseUrl ? ["--database-url", databaseUrl] : []),
    ...(values.json ? ["--json"] : []),
  ];
  const code = await serviceAccountCommand({ ...io, args });
  if (code === 0 && !values.json) {
    io.stderr.write(`Use it: export RUNPLANE_TOKEN=<the token above> (runplane commands and the dashboard take it)\n`);
  }
  return code;
}
