import { createInterface } from "node:readline";
import { Writable } from "node:stream";
import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect, projectFor } from "./connection.ts";
import { confirm, YES_OPTION } from "./confirm.ts";
import { writeJson } from "./output.ts";
import { writeTable } from "../table_format.ts";

/** Help of `runplane secrets`. */
export const SECRETS_HELP = `Usage:
  runplane secrets set [<project>] NAME    the value from stdin (piped), else a prompt that does not echo
  runplane secrets list [<project>]        names and times; a value is never shown
  runplane secrets delete [<project>] NAME [--yes]   (asks on a terminal; --yes, or -y, where there is none)

The project defaults to the token's.
A project's secrets are environment variables of its replicas (set or deleted, they are replaced; calls in
flight finish); builds never see them. NAME is an environment variable's name, refused as in [env] when it
is the platform's (RUNPLANE_*, PATH, HOME, PORT, …) or one a program reads as it starts, before the
replica drops its privileges (LD_*, MALLOC_*, GLIBC_TUNABLES, GCONV_PATH, TZ, BASH_ENV, NODE_OPTIONS,
PYTHON* but PYTHONHASHSEED and a few others, …; docs/runplane-toml.md lists them). The value
is never a flag (it would stay in the shell's history): pipe it (one trailing newline is dropped), e.g.
  runplane secrets set p-demo API_KEY < api_key.txt
An empty value (empty stdin, or an empty line at the prompt) is refused: nothing is set.
Needs a token with the deploy scope.

${CONNECTION_HELP}`;

function isTty(stream: NodeJS.ReadableStream): boolean {
  return (stream as { isTTY?: boolean }).isTTY === true;
}

/** All of a piped stdin, less one trailing newline (what `echo` and editors add). */
async function readPiped(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks).toString("utf8").replace(/\r?\n$/, "");
}

/** Asks for the value on the terminal without echoing it. */
async function prompt(io: CommandIo, input: NodeJS.ReadableStream, name: string): Promise<string> {
  // readline echoes what is typed to its output: give it one that shows nothing.
  const muted = new Writable({ write: (_chunk, _encoding, done) => done() });
  const lines = createInterface({ input, output: muted, terminal: true });
  io.stderr.write(`Value of ${name} (not shown): `);
  try {
    return await new Promise<string>((resolve, reject) => {
      lines.once(
        "line",
        (line) => line === "" ? reject(new Error("No value was entered: nothing was set")) : resolve(line),
      );
      lines.once("SIGINT", () => reject(new Error("Cancelled: nothing was set")));
      lines.once("close", () => reject(new Error("No value was entered: nothing was set")));
    });
  } finally {
    lines.close();
    io.stderr.write("\n");
  }
}

/** `runplane secrets set|list|delete`. */
export async function secretsCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  if (rest.some((arg) => arg === "--value" || arg.startsWith("--value="))) {
    throw new UsageError(
      "A secret's value is never a flag (it would stay in the shell's history): pipe it on stdin or type it at the prompt",
    );
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { ...CONNECTION_OPTIONS, ...YES_OPTION },
  });
  if (sub !== "set" && sub !== "list" && sub !== "delete") {
    throw new UsageError(
      sub ? `Unknown subcommand "${sub}": use set, list or delete` : "Name a subcommand: set, list or delete",
    );
  }
  // `secrets list` takes [<project>]; set and delete [<project>] NAME: one word alone is the name.
  const named = sub === "list" ? 0 : 1;
  const written = positionals.length > named ? positionals[0] : undefined;
  const name = sub === "list" ? undefined : positionals.at(-1);
  // One word that is no variable's name but a project's id (`secrets set p-demo`): the name is missing.
  if (sub !== "list" && positionals.length === 1 && !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name!)) {
    throw new UsageError(`secrets ${sub} needs [<project>] NAME`);
  }
  if (written?.includes("/")) throw new UsageError(`secrets ${sub} needs [<project>], a project id`);
  const project = projectFor(written, { flags: values, env: io.env, command: `secrets ${sub}` });
  if (sub === "list") {
    if (positionals.length > 1) throw new UsageError("secrets list takes [<project>] only");
    const secrets = await connect(values, io.env).listProjectSecrets(project, { signal: io.signal });
    if (values.json) return (writeJson(io, { secrets }), 0);
    if (secrets.length === 0) {
      io.stderr.write(`Project ${project} has no secrets: runplane secrets set ${project} NAME\n`);
    } else writeTable(io, ["NAME", "CREATED", "UPDATED"], secrets.map((s) => [s.name, s.created_at, s.updated_at]));
    return 0;
  }
  if (!name || positionals.length > 2) throw new UsageError(`secrets ${sub} needs [<project>] NAME`);
  const client = connect(values, io.env);
  if (sub === "delete") {
    await confirm(io, `Delete the secret ${name} of ${project}? Its replicas are replaced without it.`, {
      yes: values.yes,
      what: `the secret ${name}`,
    });
    await client.deleteProjectSecret(project, name, { signal: io.signal });
    if (values.json) writeJson(io, { deleted: name, project_id: project });
    else io.stdout.write(`Deleted ${name} of ${project}: its replicas are replaced without it\n`);
    return 0;
  }
  const input = io.stdin ?? process.stdin;
  const value = isTty(input) ? await prompt(io, input, name) : await readPiped(input);
  if (value === "") {
    throw new Error(
      `The value of ${name} on stdin is empty: nothing was set. Pipe the value (runplane secrets set ${name} < file), or run the command on a terminal to type it`,
    );
  }
  const { created, secret } = await client.setProjectSecret(project, { name, value }, { signal: io.signal });
  if (values.json) writeJson(io, { ...secret, created });
  else {
    io.stdout.write(
      `${created ? "Created" : "Replaced"} ${name} of ${project}: its replicas are replaced to see it\n`,
    );
  }
  return 0;
}
