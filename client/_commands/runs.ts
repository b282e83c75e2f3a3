import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import type { RunplaneClient, RunStatus } from "../mod.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect } from "./connection.ts";
import { writeJson } from "./output.ts";
import { formatRun, milliseconds } from "./run_format.ts";
import { readInput } from "./run_input.ts";
import { printRunLogs } from "./run_logs.ts";
import { waitAndReport } from "./run_wait.ts";
import { writeTable } from "../table_format.ts";

/** Help of `runplane runs`. */
export const RUNS_HELP = `Usage:
  runplane runs get <project>/<app> <run_id>
  runplane runs list <project>/<app> [--status queued|running|success|failure|cancelled] [--limit N] [--cursor C]
  runplane runs logs <project>/<app> <run_id> [--follow]
  runplane runs cancel <project>/<app> <run_id>
  runplane runs rerun <project>/<app> <run_id> [--data JSON | --data @file.json] [--wait]
  runplane runs redeliver <project>/<app> <run_id>

logs prints what the run's function wrote (stdout, stderr and logging; each on the stream it was written
to); --follow prints the lines as they come until the run ends (exit 1 if it failed or was cancelled).
rerun queues the same function again as an async run, recorded as a rerun of the first, and prints its
id; the input is the first run's (an async run keeps it as long as its result) unless --data gives one;
--wait waits for it as run --async --wait does. redeliver sends a finished run's webhook once more.

${CONNECTION_HELP}`;

const STATUSES: RunStatus[] = ["queued", "running", "success", "failure", "cancelled"];
const SUBCOMMANDS = ["get", "list", "logs", "cancel", "rerun", "redeliver"];

/** Lists a page of an app's runs as a table, and says how to get the next page. */
async function listRuns(
  io: CommandIo,
  client: RunplaneClient,
  options: { app: string; status?: string; limit?: string; cursor?: string; json: boolean },
): Promise<number> {
  if (options.status && !STATUSES.includes(options.status as RunStatus)) {
    throw new UsageError(`--status must be one of ${STATUSES.join(", ")}`);
  }
  if (options.limit && !/^\d+$/.test(options.limit)) {
    throw new UsageError("--limit must be a whole number from 1 to 200");
  }
  const page = await client.listRuns(options.app, {
    status: options.status as RunStatus | undefined,
    limit: options.limit ? Number(options.limit) : undefined,
    cursor: options.cursor,
    signal: io.signal,
  });
  if (options.json) return (writeJson(io, page), 0);
  if (page.runs.length === 0) io.stderr.write(`No runs of ${options.app}${options.cursor ? " on this page" : ""}\n`);
  else {
    writeTable(
      io,
      ["RUN", "STATUS", "FUNCTION", "MODE", "CREATED", "RAN"],
      page.runs.map((run) => [
        run.run_id,
        run.status,
        run.function_name,
        run.mode,
        run.created_at,
        milliseconds(run.run_time_ms),
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
      limit: { type: "string" },
      cursor: { type: "string" },
      follow: { type: "boolean", default: false },
      data: { type: "string" },
      wait: { type: "boolean", default: false },
    },
  });
  const [app, runId] = positionals;
  if (!sub || !SUBCOMMANDS.includes(sub)) {
    const choices = `${SUBCOMMANDS.slice(0, -1).join(", ")} or ${SUBCOMMANDS.at(-1)}`;
    throw new UsageError(sub ? `Unknown subcommand "${sub}": use ${choices}` : `Name a subcommand: ${choices}`);
  }
  if (!app || !/^[^/]+\/[^/]+$/.test(app)) throw new UsageError(`runs ${sub} needs <project>/<app>`);
  if (values.follow && sub !== "logs") throw new UsageError("--follow goes with runs logs");
  if ((values.data !== undefined || values.wait) && sub !== "rerun") {
    throw new UsageError("--data and --wait go with runs rerun");
  }
  const client = connect(values, io.env);
  if (sub === "list") return await listRuns(io, client, { app, ...values });
  if (!runId || positionals.length > 2) throw new UsageError(`runs ${sub} needs <project>/<app> <run_id>`);
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
