import { parseArgs } from "node:util";
import { type CommandIo, UsageError } from "../cli_command.ts";
import type { AppLogLine, RunplaneClient } from "../mod.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { appTarget, CONNECTION_HELP, CONNECTION_OPTIONS, connect } from "./connection.ts";
import { jsonText } from "./output.ts";

/** Help of `runplane logs`. */
export const LOGS_HELP = `Usage:
  runplane logs [<project>/]<app> [--follow] [--since <duration or time>]

Every run's output of an app (stdout, stderr and logging), interleaved in the order it was written, each
line prefixed with its time and run id (and written to the stream it was written to, as runs logs does).
--since: only lines from then on: a duration back from now (90s, 15m, 2h, 1d) or an RFC 3339 time;
default one hour back. --follow: then print each new line of any run as it comes, until interrupted.
--json: one JSON object per line ({"run_id", "at", "stream", "text"}).

The project defaults to the token's: <app> alone is an app of it.

${CONNECTION_HELP}`;

const UNIT_MS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--since` as Unix ms: a duration back from `now` (`90s`, `15m`, `2h`, `1d`) or an RFC 3339 time. */
export function parseSince(text: string, now: number): number {
  const duration = /^(\d{1,9})([smhd])$/.exec(text);
  if (duration) return now - Number(duration[1]) * UNIT_MS[duration[2]];
  const at = /^\d{4}-\d{2}-\d{2}T/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(at)) {
    throw new UsageError(
      `--since takes a duration (90s, 15m, 2h, 1d) or an RFC 3339 time, not ${JSON.stringify(text)}`,
    );
  }
  return at;
}

function printLine(io: CommandIo, line: AppLogLine, json: boolean): void {
  if (json) {
    io.stdout.write(`${jsonText(line)}\n`);
    return;
  }
  const stream = line.stream === "stderr" ? io.stderr : io.stdout;
  stream.write(`${line.at} ${line.run_id} ${stripTerminalControls(line.text)}\n`);
}

/** `runplane logs`: an app's lines from `--since`, page by page, then (`--follow`) each new one. */
export async function logsCommand(io: CommandIo): Promise<number> {
  const { values, positionals } = parseArgs({
    args: io.args,
    allowPositionals: true,
    options: {
      ...CONNECTION_OPTIONS,
      follow: { type: "boolean", short: "f", default: false },
      since: { type: "string" },
    },
  });
  if (positionals.length > 1) throw new UsageError("logs takes one [<project>/]<app>");
  const app = appTarget(positionals[0], { flags: values, env: io.env, usage: "logs needs [<project>/]<app>" });
  const since = values.since === undefined ? undefined : parseSince(values.since, Date.now());
  const client: RunplaneClient = connect(values, io.env);
  if (values.follow) {
    try {
      for await (const line of client.followAppLogs(app, { since, signal: io.signal })) {
        printLine(io, line, values.json);
      }
    } catch (error) {
      // Interrupted (Ctrl-C): the way a tail ends.
      if (io.signal?.aborted) return 0;
      throw error;
    }
    if (io.signal?.aborted) return 0;
    // The stream ends only when the server stops: say so rather than pass for a finished tail.
    throw new Error(`The log stream of ${app} ended (the server closed it): follow it again`);
  }
  let cursor: string | undefined;
  for (;;) {
    const page = await client.appLogs(app, { since, cursor, limit: 1000, signal: io.signal });
    for (const line of page.lines) printLine(io, line, values.json);
    if (!page.has_more) return 0;
    cursor = page.next_cursor;
  }
}
