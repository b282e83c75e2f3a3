import type { CommandIo } from "../cli_command.ts";
import type { RunLogLine, RunplaneClient } from "../mod.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { jsonText, writeJson } from "./output.ts";

/** Options of `printRunLogs`. */
export interface RunLogsOptions {
  app: string;
  runId: string;
  follow: boolean;
  json: boolean;
}

/** A line the function wrote goes to the stream it wrote it on, as `docker logs` does. */
function printLine(io: CommandIo, line: RunLogLine, json: boolean): void {
  if (json) io.stdout.write(`${jsonText(line)}\n`);
  else (line.stream === "stderr" ? io.stderr : io.stdout).write(`${stripTerminalControls(line.text)}\n`);
}

/**
 * `runplane runs logs`: a run's output so far, or (`follow`) line by line until the run ends. `json`
 * prints the log document, or when following one JSON line per log line and then `{"status": …}`.
 * Resolves with the exit code: 1 when a followed run ended in failure or was cancelled.
 */
export async function printRunLogs(io: CommandIo, client: RunplaneClient, options: RunLogsOptions): Promise<number> {
  const { app, runId, json } = options;
  if (!options.follow) {
    const log = await client.runLogs(app, runId, { signal: io.signal });
    if (json) return (writeJson(io, log), 0);
    if (log.truncated) io.stderr.write("(the oldest lines were dropped: the run wrote more than the server keeps)\n");
    for (const line of log.lines) printLine(io, line, false);
    return 0;
  }
  for await (const event of client.followRunLogs(app, runId, { signal: io.signal })) {
    if ("line" in event) {
      printLine(io, event.line, json);
      continue;
    }
    if (json) io.stdout.write(`${jsonText(event.end)}\n`);
    else if (event.end.status !== "success") io.stderr.write(`Run ${runId} ended: ${event.end.status}\n`);
    return event.end.status === "success" ? 0 : 1;
  }
  // The stream ended without the run's end (the server stopped): say so rather than pass for success.
  throw new Error(`The log stream of run ${runId} ended before the run did: follow it again`);
}
