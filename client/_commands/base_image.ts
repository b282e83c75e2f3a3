import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { baseImageRequestFromToml } from "../base_image_request.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect, projectFor } from "./connection.ts";
import { writeJson } from "./output.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";

/** Help of `runplane base-image`. */
export const BASE_IMAGE_HELP =
  `Usage: runplane base-image [--project <id>] --app <name> [--config path/to/runplane.toml]

Hashes the app's build dependencies ([dependencies.pip|apt|conda] and [build] base_image,
shell_commands, pre_build_commands of its runplane.toml) and prints the digest and what a build of them
will do on the server: new (pip will make their virtualenv) or cached (a ready one is reused, or there
are no pip requirements). The default config is
<RUNPLANE_APPS_DIR, else examples/apps>/<project>/<app>/runplane.toml.

${CONNECTION_HELP}`;

/** `runplane base-image`: prints the digest of an app's build dependencies. */
export async function baseImageCommand(io: CommandIo): Promise<number> {
  const { values } = parseArgs({
    args: io.args,
    options: {
      ...CONNECTION_OPTIONS,
      project: { type: "string" },
      app: { type: "string" },
      config: { type: "string" },
    },
  });
  if (!values.app) throw new UsageError("base-image needs --app");
  const project = projectFor(values.project, { flags: values, env: io.env, command: "base-image" });
  const path = values.config
    ?? join(io.env.RUNPLANE_APPS_DIR ?? "examples/apps", project, values.app, "runplane.toml");
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    throw new Error(
      `Cannot read ${path} (${(error as NodeJS.ErrnoException).code}): pass the app's config with --config`,
    );
  }
  let request;
  try {
    request = baseImageRequestFromToml(text);
  } catch (error) {
    throw new Error(`${path}: ${(error as Error).message}`);
  }
  const outcome = await connect(values, io.env).baseImageHash({ project, app: values.app }, request);
  if (values.json) writeJson(io, outcome);
  else io.stdout.write(`${outcome.digest} ${outcome.status}\n`);
  return 0;
}
