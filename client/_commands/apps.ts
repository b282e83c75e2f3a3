import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import type { App } from "../mod.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect } from "./connection.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { writeJson } from "./output.ts";

/** Help of `runplane apps`. */
export const APPS_HELP = `Usage:
  runplane apps list <project>
  runplane apps get <project>/<app>
  runplane apps delete <project>/<app>     (a deployed app: new calls answer 404, calls in flight finish)

${CONNECTION_HELP}`;

function replicas(app: App): string {
  const { starting, idle, busy } = app.replicas;
  return `${busy} busy, ${idle} idle, ${starting} starting`;
}

/** An app for people: one line of identity and state, then its settings. */
export function formatApp(app: App): string {
  const lines = [
    `${app.project_id}/${app.app_id} ${app.state} (${app.source}${app.runtime ? `, ${app.runtime}` : ""})`,
    `active deployment: ${app.active_deployment_id ?? "-"}`,
    `replicas: ${replicas(app)}; queued runs: ${app.queued_runs}`,
  ];
  if (app.scaling) {
    const s = app.scaling;
    lines.push(
      `scaling: ${s.min_replicas}..${s.max_replicas} replicas, ${s.replica_concurrency} calls each, cooldown ${s.cooldown} s`,
    );
  }
  if (app.error) lines.push(`error: ${stripTerminalControls(app.error)}`);
  return lines.join("\n");
}

/** `runplane apps list|get|delete`. */
export async function appsCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  const { values, positionals } = parseArgs({ args: rest, allowPositionals: true, options: CONNECTION_OPTIONS });
  if (sub !== "list" && sub !== "get" && sub !== "delete") {
    throw new UsageError(
      sub ? `Unknown subcommand "${sub}": use list, get or delete` : "Name a subcommand: list, get or delete",
    );
  }
  const [target] = positionals;
  const client = connect(values, io.env);
  if (sub === "list") {
    if (!target || target.includes("/") || positionals.length > 1) throw new UsageError("apps list needs <project>");
    const apps = await client.listApps(target, { signal: io.signal });
    if (values.json) return (writeJson(io, { apps }), 0);
    if (apps.length === 0) {
      io.stderr.write(`Project ${target} has no apps yet: runplane deploy <dir> --project ${target}\n`);
    }
    for (const app of apps) {
      io.stdout.write(
        `${app.app_id}\t${app.state}\t${app.source}\t${app.runtime ?? "-"}\t${app.active_deployment_id ?? "-"}\t${
          replicas(app)
        }\n`,
      );
    }
    return 0;
  }
  if (!target || !/^[^/]+\/[^/]+$/.test(target) || positionals.length > 1) {
    throw new UsageError(`apps ${sub} needs <project>/<app>`);
  }
  if (sub === "get") {
    const app = await client.getApp(target, { signal: io.signal });
    if (values.json) writeJson(io, app);
    else io.stdout.write(`${formatApp(app)}\n`);
    return 0;
  }
  await client.deleteApp(target, { signal: io.signal });
  if (values.json) writeJson(io, { deleted: target });
  else io.stdout.write(`Deleted ${target}: new calls answer 404\n`);
  return 0;
}
