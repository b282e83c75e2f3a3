import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import type { RunplaneClient, RunStatus } from "../mod.ts";
import { appTarget, CONNECTION_HELP, CONNECTION_OPTIONS, connect, projectFor } from "./connection.ts";
import { writeJson } from "./output.ts";
import { formatRun, milliseconds } from "./run_format.ts";
import { readInput } from "./run_input.ts";
import { printRunLogs } from "./run_logs.ts";
import { waitAndReport } from "./run_wait.ts";
import { writeTable } from "../table_format.ts";

/** Help of `runplane runs`. */
export const RUNS_HELP = `Usage:
  runplane runs get [<project>/]<app> <run_id>
  runplane runs list [<project>[/<app>]] [--status queued|running|success|failure|cancelled] [--function F]
                     [--mode sync|async|stream|websocket] [--after TIME] [--before TIME] [--limit N] [--cursor C]
  runplane runs logs [<project>/]<app> <run_id> [--follow]
  runplane runs cancel [<project>/]<app> <run_id>
  runplane runs rerun [<project>/]<app> <run_id> [--data JSON | --data @file.json] [--wait]
  runplane runs redeliver [<project>/]<app> <run_id>

The project defaults to the token's: list alone lists its runs, and <app> alone is an app of it.

list with a project alone lists the runs of all its apps (with each run's app and error); --function,
--mode and the creation-time range (--after inclusive, --before exclusive, RFC 3339 times) filter it.
logs prints what the run's function wrote (stdout, stderr and logging; each on the stream it was written
to); --follow prints the lines as they come until the run ends (exit 1 if it failed or was cancelled).
rerun queues the same function again as an async run, recorded as a rerun of the first, and prints its
id; the input is the first run's (an async run keeps it as long as its result) unless --data gives one;
--wait waits for it as run --async --wait does. redeliver sends a finished run's webhook once more.

${CONNECTION_HELP}`;

const STATUSES: RunStatus[] = ["queued", "running", "success", "failure", "cancelled"];
const SUBCOMMANDS = ["get", "list", "logs", "cancel", "rerun", "redeliver"];

/** The options of `runs list`. */
interface ListOptions {
  /** `<project>` or `<project>/<app>`. */
  target: string;
  status?: string;
  function?: string;
  mode?: string;
  after?: string;
  before?: string;
  limit?: string;
  cursor?: string;
  json: boolean;
}

const MODES = ["sync", "async", "stream", "websocket"] as const;

function checkListOptions(options: ListOptions): void {
  if (options.status && !STATUSES.includes(options.status as RunStatus)) {
    throw new UsageError(`--status must be one of ${STATUSES.join(", ")}`);
  }
  if (options.mode && !(MODES as readonly string[]).includes(options.mode)) {
    throw new UsageError(`--mode must be one of ${MODES.join(", ")}`);
  }
  if (options.limit && !/^\d+$/.test(options.limit)) {
    throw new UsageError("--limit must be a whole number from 1 to 200");
  }
}

/**
 * Lists a page of runs as a table, and says how to get the next page: an app's (`listRuns`), or a
 * project's across its apps, or filtered by function, mode or time (`listProjectRuns`).
 */
async function listRuns(io: CommandIo, client: RunplaneClient, options: ListOptions): Promise<number> {
  checkListOptions(options);
  const [project, app] = options.target.split("/");
  const common = {
    status: options.status as RunStatus | undefined,
    limit: options.limit ? Number(options.limit) : undefined,
    cursor: options.cursor,
    signal: io.signal,
  };
  const wide = !app || options.function !== undefined || options.mode !== undefined
    || options.after !== undefined || options.before !== undefined;
  const page = wide
    ? await client.listProjectRuns(project, {
      ...common,
      app,
      functionName: options.function,
      mode: options.mode as (typeof MODES)[number] | undefined,
      createdAfter: options.after,
      createdBefore: options.before,
    })
    : await client.listRuns(options.target, common);
  if (options.json) return (writeJson(io, page), 0);
  if (page.runs.length === 0) io.stderr.write(`No runs of ${options.target}${options.cursor ? " on this page" : ""}\n`);
  else {
    writeTable(
      io,
      ["RUN", ...(app ? [] : ["APP"]), "STATUS", "FUNCTION", "MODE", "CREATED", "RAN", "ERROR"],
      page.runs.map((run) => [
        run.run_id,
        ...(app ? [] : [run.app_id]),
        run.status,
        run.function_name,
        run.mode,
        run.created_at,
        milliseconds(run.run_time_ms),
        run.error ? `${run.error.type}: ${run.error.message}` : "",
      ]),
    );
  }
  if (page.next_cursor) io.stderr.write(`More runs: add --cursor ${page.next_cursor}\n`);
  return 0;
}

/** Queues a run's function again with its input (or `data`), as a rerun of it. */
async function rerun(
  io: CommandIo,
  client: RunplaneClient,
  options: { app: string; runId: string; data?: string; wait: boolean; json: boolean },
): Promise<number> {
  const given = options.data === undefined ? undefined : await readInput(options.data);
  const first = await client.getRun(options.app, options.runId, { signal: io.signal });
  const input = given ?? first.input;
  if (input === null || typeof input !== "object" || Array.isArray(input)) {
    throw new Error(
      `Run ${first.run_id} kept no input (a ${first.mode} run does not; an async run keeps it as long as its result): give the input with --data`,
    );
  }
  const target = `${options.app}/${first.function_name}`;
  const runId = await client.runAsync(target, input as Record<string, unknown>, {
    rerunOf: first.run_id,
    signal: io.signal,
  });
  if (options.wait) return await waitAndReport(io, client, { app: options.app, runId, json: options.json });
  if (options.json) writeJson(io, { run_id: runId, rerun_of: first.run_id });
  else io.stdout.write(`${runId}\n`);
  return 0;
}

/** `runplane runs get|list|logs|cancel|rerun|redeliver`. */
export async function runsCommand(io: CommandIo): Promise<number> {
  const [sub, ...rest] = io.args;
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      ...CONNECTION_OPTIONS,
      status: { type: "string" },
      function: { type: "string" },
      mode: { type: "string" },
      after: { type: "string" },
      before: { type: "string" },
      limit: { type: "string" },
      cursor: { type: "string" },
      follow: { type: "boolean", default: false },
      data: { type: "string" },
      wait: { type: "boolean", default: false },
    },
  });
  const [written, runId] = positionals;
  if (!sub || !SUBCOMMANDS.includes(sub)) {
    const choices = `${SUBCOMMANDS.slice(0, -1).join(", ")} or ${SUBCOMMANDS.at(-1)}`;
    throw new UsageError(sub ? `Unknown subcommand "${sub}": use ${choices}` : `Name a subcommand: ${choices}`);
  }
  if (sub === "list") {
    if (positionals.length > 1 || (written && !/^[^/]+(\/[^/]+)?$/.test(written))) {
      throw new UsageError("runs list takes [<project>[/<app>]]");
    }
    const target = written ?? projectFor(undefined, { flags: values, env: io.env, command: "runs list" });
    return await listRuns(io, connect(values, io.env), { target, ...values });
  }
  const app = appTarget(written, { flags: values, env: io.env, usage: `runs ${sub} needs [<project>/]<app>` });
  const onlyList = ["function", "mode", "after", "before"] as const;
  const misplaced = onlyList.filter((name) => values[name] !== undefined);
  if (misplaced.length) throw new UsageError(`--${misplaced.join(", --")} go with runs list`);
  if (values.follow && sub !== "logs") throw new UsageError("--follow goes with runs logs");
  if ((values.data !== undefined || values.wait) && sub !== "rerun") {
    throw new UsageError("--data and --wait go with runs rerun");
  }
  const client = connect(values, io.env);
  if (!runId || positionals.length > 2) throw new UsageError(`runs ${sub} needs [<project>/]<app> <run_id>`);
  if (sub === "logs") return await printRunLogs(io, client, { app, runId, follow: values.follow, json: values.json });
  if (sub === "rerun") return await rerun(io, client, { app, runId, ...values });
  const signal = { signal: io.signal };
  const run = sub === "get"
    ? await client.getRun(app, runId, signal)
    : sub === "cancel"
    ? await client.cancelRun(app, runId, signal)
    : await client.redeliverWebhook(app, runId, signal);
  if (values.json) writeJson(io, run);
  else if (sub === "redeliver") {
    io.stdout.write(`Redelivering the webhook of ${run.run_id} to ${run.webhook?.endpoint ?? "its endpoint"}\n`);
  } else io.stdout.write(`${formatRun(run)}\n`);
  return 0;
}
