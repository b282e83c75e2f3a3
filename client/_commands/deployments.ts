import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import type { Deployment } from "../mod.ts";
import { appTarget, CONNECTION_HELP, CONNECTION_OPTIONS, connect } from "./connection.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { writeJson } from "./output.ts";
import { writeTable } from "../table_format.ts";
import { commitLabel } from "./work_tree.ts";

/** Help of `runplane deployments`. */
export const DEPLOYMENTS_HELP = `Usage:
  runplane deployments list [<project>/]<app> [--limit N] [--cursor C]
  runplane deployments get [<project>/]<app> <deployment_id>   (its build, source and the image it runs in)
  runplane deployments logs [<project>/]<app> <deployment_id> [--follow]
  runplane deployments activate [<project>/]<app> <deployment_id>   (roll back, or forward, to a ready one)

<app> alone is an app of the token's project.

${CONNECTION_HELP}`;

/** The longest message a table shows (its first line); `--json` has it whole. */
const MESSAGE_WIDTH = 48;

/** A message's first line, cut to `MESSAGE_WIDTH` characters. */
function messageCell(message: string | null): string | null {
  if (message === null) return null;
  const [first] = message.split("\n");
  const more = first.length < message.trimEnd().length;
  return first.length > MESSAGE_WIDTH ? `${first.slice(0, MESSAGE_WIDTH - 1)}…` : more ? `${first} …` : first;
}

/**
 * A table row per deployment: id, status, whether it serves, when, from what (a repository, or a bundle
 * with its commit, `-dirty` when its folder differed), what its deployer said of it, and why it failed.
 */
function deploymentRow(d: Deployment): Array<string | null> {
  const source = sourceText(d);
  return [d.deployment_id, d.status, d.active ? "active" : "-", d.created_at, source, messageCell(d.message), d.error];
}

/** A deployment's source in one cell: a repository at its commit, or a bundle (at the commit it names). */
function sourceText(d: Deployment): string {
  return d.repository
    ? `${d.repository.owner}/${d.repository.repo}@${d.repository.commit.slice(0, 7)}`
    : d.commit
    ? `bundle@${commitLabel({ commit: d.commit, dirty: d.dirty })}`
    : "bundle";
}

/**
 * A deployment for people: one line of identity and state, then where it came from, the image it runs in
 * (`[build] base_image`: its reference and the digest pulled; the host's system without one), its dependency
 * layer, message, and why it failed.
 */
export function formatDeployment(d: Deployment): string {
  const lines = [
    `${d.project_id}/${d.app_id} ${d.deployment_id} ${d.status}${d.active ? " (active)" : ""}`,
    `created: ${d.created_at}; finished: ${d.finished_at ?? "-"}`,
    `source: ${sourceText(d)}`,
    `image: ${d.image ? d.image.reference : "- (the host's system)"}`,
  ];
  if (d.image) lines.push(`image digest: ${d.image.digest}`);
  if (d.base_image_digest) lines.push(`dependency layer: ${d.base_image_digest} (${d.base_image_status ?? "none"})`);
  if (d.message !== null) lines.push(`message: ${d.message.replace(/\s*\n\s*/g, " ")}`);
  if (d.error !== null) lines.push(`error: ${d.error}`);
  return stripTerminalControls(lines.join("\n"));
}

/** `runplane deployments list|get|logs|activate`. */
export async function deploymentsCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      ...CONNECTION_OPTIONS,
      limit: { type: "string" },
      cursor: { type: "string" },
      follow: { type: "boolean", default: false },
    },
  });
  if (sub !== "list" && sub !== "get" && sub !== "logs" && sub !== "activate") {
    throw new UsageError(
      sub
        ? `Unknown subcommand "${sub}": use list, get, logs or activate`
        : "Name a subcommand: list, get, logs or activate",
    );
  }
  const [written, deploymentId] = positionals;
  const app = appTarget(written, { flags: values, env: io.env, usage: `deployments ${sub} needs [<project>/]<app>` });
  const client = connect(values, io.env);
  if (sub === "list") {
    if (values.limit && !/^\d+$/.test(values.limit)) {
      throw new UsageError("--limit must be a whole number from 1 to 200");
    }
    const page = await client.listDeployments(app, {
      limit: values.limit ? Number(values.limit) : undefined,
      cursor: values.cursor,
      signal: io.signal,
    });
    if (values.json) return (writeJson(io, page), 0);
    writeTable(
      io,
      ["DEPLOYMENT", "STATUS", "ACTIVE", "CREATED", "SOURCE", "MESSAGE", "ERROR"],
      page.deployments.map(deploymentRow),
    );
    if (page.next_cursor) io.stderr.write(`More deployments: add --cursor ${page.next_cursor}\n`);
    return 0;
  }
  if (!deploymentId || positionals.length > 2) {
    throw new UsageError(`deployments ${sub} needs [<project>/]<app> <deployment_id>`);
  }
  if (sub === "get") {
    const d = await client.getDeployment(app, deploymentId, { signal: io.signal });
    if (values.json) writeJson(io, d);
    else io.stdout.write(`${formatDeployment(d)}\n`);
    return 0;
  }
  if (sub === "activate") {
    const d = await client.activateDeployment(app, deploymentId, { signal: io.signal });
    if (values.json) writeJson(io, d);
    else io.stdout.write(`${app} now serves ${d.deployment_id}\n`);
    return 0;
  }
  if (!values.follow) {
    io.stdout.write(stripTerminalControls(await client.deploymentLogs(app, deploymentId, { signal: io.signal })));
    return 0;
  }
  for await (const event of client.followDeploymentLogs(app, deploymentId, { signal: io.signal })) {
    if ("line" in event) {
      io.stdout.write(`${stripTerminalControls(event.line)}\n`);
      continue;
    }
    if (values.json) writeJson(io, event.end);
    if (event.end.status === "failed") {
      io.stderr.write(`Build failed: ${stripTerminalControls(event.end.error ?? "")}\n`);
      return 1;
    }
  }
  return 0;
}
