import { constants } from "node:fs";
import { access, mkdir, writeFile } from "node:fs/promises";
import { basename, join, relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import { tokenProject } from "./connection.ts";

/** Help of `runplane init`. */
export const INIT_HELP = `Usage: runplane init [dir] [--name <app>]

Writes a new app into dir (default: the current folder, created if missing): runplane.toml, a main.py
with a function that answers once (run) and one that streams (count), and a README.md. The app's name is
--name, else the folder's name. Refuses, writing nothing, when any of the three files exists already.
Then: runplane deploy <dir>, into the token's project (p-demo for the demo token npm start prints;
--project <id> names the project a token of another belongs to).`;

/** An app's name as the API takes it. */
const APP_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

function toml(name: string): string {
  return `# How Runplane builds and runs this app (docs/runplane-toml.md in Runplane's repository).
[deployment]
name = "${name}"

[scaling]
max_replicas = 1
replica_concurrency = 4

# What each replica may use: cores, GiB of memory (and gpu_count).
[hardware]
cpu = 1
memory = 2

# Python packages the build installs, one name and version each:
# [dependencies.pip]
# requests = "2.32.3"
`;
}

const MAIN_PY = `"""A Runplane app: each top-level function is called with the JSON body's members as its arguments."""


def run(name: str, greeting: str = "Hello") -> dict:
    """Answers once: POST /v4/<project>/<app>/run with {"name": "Ada"}."""
    print(f"greeting {name}")  # what a function prints is its run's log (runplane runs logs)
    return {"message": f"{greeting}, {name}!"}


def count(to: int = 3):
    """Streams: a generator's items arrive one by one as server-sent events."""
    for n in range(1, to + 1):
        yield {"n": n}
`;

function readme(name: string): string {
  return `# ${name}

A Runplane app: \`runplane deploy .\` deploys it into your token's project (p-demo for the demo token);
\`runplane run ${name} --data '{"name": "Ada"}'\` calls \`run\`, and
\`runplane run p-demo/${name}/count --stream\` follows \`count\` (name your project instead of p-demo).
`;
}

async function exists(path: string): Promise<boolean> {
  return await access(path, constants.F_OK).then(() => true, () => false);
}

/** `runplane init [dir]`: scaffolds an app, never over a file that exists. */
export async function initCommand(io: CommandIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: io.args,
    allowPositionals: true,
    options: { name: { type: "string" } },
  });
  if (positionals.length > 1) throw new UsageError("init takes at most one folder");
  const dir = resolve(positionals[0] ?? ".");
  const name = values.name ?? basename(dir);
  if (!APP_NAME.test(name)) {
    throw new UsageError(
      `"${name}" is not an app name (letters, digits, _ and -, starting with a letter or digit): pass --name <app>`,
    );
  }
  const files: Record<string, string> = { "runplane.toml": toml(name), "main.py": MAIN_PY, "README.md": readme(name) };
  const present = [];
  for (const file of Object.keys(files)) if (await exists(join(dir, file))) present.push(file);
  if (present.length) {
    throw new Error(`${dir} already has ${present.join(", ")}: nothing was written; choose an empty folder`);
  }
  await mkdir(dir, { recursive: true });
  // `wx`: a file made meanwhile is not overwritten either.
  for (const [file, text] of Object.entries(files)) await writeFile(join(dir, file), text, { flag: "wx" });
  const shown = relative(process.cwd(), dir) || ".";
  const project = tokenProject({}, io.env);
  const into = project
    ? `into project ${project}, your token's`
    : `into your token's project: p-demo for the demo token npm start printed`;
  io.stdout.write(
    `Created app ${name} in ${shown}: runplane.toml, main.py, README.md\nDeploy it ${into}:\n  runplane deploy ${shown}\n`,
  );
  return 0;
}
