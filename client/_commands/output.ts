import { isRunplaneError } from "../mod.ts";
import type { CommandIo } from "../cli_command.ts";

/** Writes `value` as one JSON document on stdout. */
export function writeJson(io: Pick<CommandIo, "stdout">, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** Whether `stream` is a terminal (progress is shown only there, never when piped). */
export function isTerminal(stream: NodeJS.WritableStream): boolean {
  return (stream as { isTTY?: boolean }).isTTY === true;
}

/** Replaces the progress line on a terminal stderr; does nothing when stderr is piped. */
export function showProgress(io: Pick<CommandIo, "stderr">, text: string): void {
  if (isTerminal(io.stderr)) io.stderr.write(`\r\x1b[K${text}`);
}

/** Clears the progress line, if one is shown. */
export function clearProgress(io: Pick<CommandIo, "stderr">): void {
  if (isTerminal(io.stderr)) io.stderr.write("\r\x1b[K");
}

/**
 * The one-line description of a failure for stderr: a problem's title and detail (and run id), or
 * what to check when the server could not be reached. Never a stack trace.
 */
export function describeError(error: unknown): string {
  if (isRunplaneError(error)) {
    const { title, detail } = error.problem;
    const runId = error.runId ? ` (run ${error.runId})` : "";
    return `${title}${detail ? `: ${detail}` : ""}${runId}`;
  }
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  if (error instanceof TypeError && error.message === "fetch failed") {
    return `Cannot reach the server (${
      cause?.code ?? cause?.message ?? "network error"
    }): check --base-url/--api-url or RUNPLANE_BASE_URL/RUNPLANE_API_URL`;
  }
  return (error as Error).message ?? String(error);
}

/** The JSON form of a failure for `--json`: the problem document, or `{ title, detail }`. */
export function errorAsJson(error: unknown): unknown {
  return isRunplaneError(error) ? error.problem : { title: "Command failed", detail: describeError(error) };
}
