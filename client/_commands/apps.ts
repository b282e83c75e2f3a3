import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import type { App } from "../mod.ts";
import { appTarget, CONNECTION_HELP, CONNECTION_OPTIONS, connect, projectFor, tokenProject } from "./connection.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { confirm, YES_OPTION } from "./confirm.ts";
import { writeJson } from "./output.ts";
import { plural } from "../plural.ts";
import { writeTable } from "../table_format.ts";

/** Help of `runplane apps`. */
export const APPS_HELP = `Usage:
  runplane apps list [<project>]
  runplane apps get [<project>/]<app>
  runplane apps delete [<project>/]<app> [--yes]   (a deployed app: new calls answer 404, calls in flight finish)

The project defaults to the token's (list alone lists its apps; <app> alone is an app of it).
delete asks for a confirmation on a terminal; --yes (-y) skips it, and is needed where there is no terminal.

${CONNECTION_HELP}`;

function replicas(app: App): string {
  const { starting, idle, busy } = app.replicas;
  return `${busy} busy, ${idle} idle, ${starting} starting`;
}

/** `[hardware]` in one line: `hardware: 0.5 cores, 2 GiB, 1 GPU (HOPPER_H100)`. */
function hardware(app: App): string | null {
  const h = app.hardware;
  if (!h) return null;
  const gpus = h.gpu_count === 0 ? "" : `, ${h.gpu_count} GPU${h.gpu_count === 1 ? "" : "s"}`;
  const compute = h.compute === null ? "" : ` (${stripTerminalControls(h.compute)})`;
  return `hardware: ${plural(h.cpu, "core")}, ${h.memory} GiB${gpus}${compute}`;
}

/** Which replica holds which GPUs: one line each, `  pid 4182: GPU-3a7b… (NVIDIA H100 80GB HBM3)`. */
function replicaGpus(app: App): string[] {
  return app.replicas.gpus.map((replica) => {
    const gpus = replica.gpus.map((gpu) => `${gpu.id}${gpu.model === null ? "" : ` (${gpu.model})`}`);
    return stripTerminalControls(
      `  replica ${replica.pid === null ? "(starting)" : `pid ${replica.pid}`}: ${gpus.join(", ")}`,
    );
  });
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
      `scaling: ${s.min_replicas}..${plural(s.max_replicas, "replica")}, ${
        plural(s.replica_concurrency, "call")
      } each, cooldown ${s.cooldown} s`,
    );
  }
  const hw = hardware(app);
  if (hw) lines.push(hw);
  if (app.replicas.gpus.length) lines.push("GPUs held:", ...replicaGpus(app));
  if (app.error) lines.push(`error: ${stripTerminalControls(app.error)}`);
  return lines.join("\n");
}

/** `runplane apps list|get|delete`. */
export async function appsCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: { ...CONNECTION_OPTIONS, ...YES_OPTION },
  });
  if (sub !== "list" && sub !== "get" && sub !== "delete") {
    throw new UsageError(
      sub ? `Unknown subcommand "${sub}": use list, get or delete` : "Name a subcommand: list, get or delete",
    );
  }
  const [written] = positionals;
  const client = connect(values, io.env);
  if (sub === "list") {
    if (written?.includes("/") || positionals.length > 1) throw new UsageError("apps list takes [<project>]");
    const target = projectFor(written, { flags: values, env: io.env, command: "apps list" });
    const apps = await client.listApps(target, { signal: io.signal });
    if (values.json) return (writeJson(io, { apps }), 0);
    if (apps.length === 0) {
      const flag = target === tokenProject(values, io.env) ? "" : ` --project ${target}`;
      io.stderr.write(`Project ${target} has no apps yet: runplane deploy <dir>${flag}\n`);
    } else {
      writeTable(
        io,
        ["APP", "STATE", "SOURCE", "RUNTIME", "ACTIVE DEPLOYMENT", "REPLICAS"],
        apps.map((app) => [app.app_id, app.state, app.source, app.runtime, app.active_deployment_id, replicas(app)]),
      );
    }
    return 0;
  }
  if (positionals.length > 1) throw new UsageError(`apps ${sub} takes one [<project>/]<app>`);
  const target = appTarget(written, { flags: values, env: io.env, usage: `apps ${sub} needs [<project>/]<app>` });
  if (sub === "get") {
    const app = await client.getApp(target, { signal: io.signal });
    if (values.json) writeJson(io, app);
    else io.stdout.write(`${formatApp(app)}\n`);
    return 0;
  }
  await confirm(io, `Delete ${target}? New calls will answer 404.`, {
    yes: values.yes,
    what: target,
  });
  await client.deleteApp(target, { signal: io.signal });
  if (values.json) writeJson(io, { deleted: target });
  else io.stdout.write(`Deleted ${target}: new calls answer 404\n`);
  return 0;
}
