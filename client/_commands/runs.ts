import { parseArgs } from "node:util";
import type { Run, RunStatus } from "../mod.ts";
import { CONNECTION_HELP, CONNECTION_OPTIONS, connect } from "./connection.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { writeJson } from "./output.ts";
import { type CommandIo, UsageError } from "../cli_command.ts";

/** Help of `runplane runs`. */
export const RUNS_HELP = `Usage:
  runplane runs get <project>/<app> <run_id>
  runplane runs list <project>/<app> [--status queued|running|success|failure|cancelled] [--limit N] [--cursor C]
  runplane runs cancel <project>/<app> <run_id>

${CONNECTION_HELP}`;

const STATUSES: RunStatus[] = ["queued", "running", "success", "failure", "cancelled"];

function milliseconds(value: number | null): string {
  return value === null ? "-" : `${value.toFixed(1)} ms`;
}

/**
 * A run's record for people: status line, timings, then the result or the error; without terminal
 * control sequences (the error's message and traceback are the function's).
 */
export function formatRun(run: Run): string {
  const lines = [
    `${run.run_id} ${run.status} (${run.project_id}/${run.app_id}/${run.function_name}, ${run.mode})`,
    `created ${run.created_at}, queued ${milliseconds(run.queue_time_ms)}, ran ${milliseconds(run.run_time_ms)}`,
  ];
  if (run.error) {
    const { type, message, traceback } = run.error;
    // The Python runtime's messages already start with the exception's type ("ValueError: ...").
    lines.push(
      `error: ${message.startsWith(`${type}: `) ? message : `${type}: ${message}`}`,
      ...(traceback ? [traceback] : []),
    );
  }
  if (run.status === "success") {
    lines.push(run.result_expired ? "result: expired" : `result: ${JSON.stringify(run.result, null, 2)}`);
  }
  if (run.webhook) {
    lines.push(`webhook: ${run.webhook.status} (${run.webhook.attempts.length} attempts) ${run.webhook.endpoint}`);
  }
  return stripTerminalControls(lines.join("\n"));
}

/** `runplane runs get|list|cancel`. */
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
    },
  });
  const [app, runId] = positionals;
  if (sub !== "get" && sub !== "list" && sub !== "cancel") {
    throw new UsageError(
      sub ? `Unknown subcommand "${sub}": use get, list or cancel` : "Name a subcommand: get, list or cancel",
    );
  }
  if (!app || !/^[^/]+\/[^/]+$/.test(app)) throw new UsageError(`runs ${sub} needs <project>/<app>`);
  const client = connect(values, io.env);
  if (sub === "list") {
    if (values.status && !STATUSES.includes(values.status as RunStatus)) {
      throw new UsageError(`--status must be one of ${STATUSES.join(", ")}`);
    }
    if (values.limit && !/^\d+$/.test(values.limit)) {
      throw new UsageError("--limit must be a whole number from 1 to 200");
    }
    const page = await client.listRuns(app, {
      status: values.status as RunStatus | undefined,
      limit: values.limit ? Number(values.limit) : undefined,
      cursor: values.cursor,
    });
    if (values.json) return (writeJson(io, page), 0);
    for (const run of page.runs) {
      io.stdout.write(
        `${run.run_id}\t${run.status}\t${run.function_name}\t${run.created_at}\t${milliseconds(run.run_time_ms)}\n`,
      );
    }
    if (page.next_cursor) io.stderr.write(`More runs: add --cursor ${page.next_cursor}\n`);
    return 0;
  }
  if (!runId || positionals.length > 2) throw new UsageError(`runs ${sub} needs <project>/<app> <run_id>`);
  const run = sub === "get" ? await client.getRun(app, runId) : await client.cancelRun(app, runId);
  if (values.json) writeJson(io, run);
  else io.stdout.write(`${formatRun(run)}\n`);
  return 0;
}
