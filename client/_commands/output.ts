import { isRunplaneError, RunplaneConnectionError } from "../mod.ts";
import type { CommandIo } from "../cli_command.ts";
import { stripTerminalControls } from "../terminal_text.ts";
import { type AuthContext, authHint } from "./auth_hint.ts";

/**
 * `value` as JSON text that is safe on a terminal and means the same: `JSON.stringify` escapes C0
 * controls but writes DEL and the C1 controls (U+0080 to U+009F, e.g. the 8-bit CSI) as they are; here
 * they are `\u` escapes too.
 */
export function jsonText(value: unknown, indent?: number): string {
  return JSON.stringify(value, null, indent).replace(
    /[\x7f-\x9f]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/** Writes `value` as one JSON document on stdout. */
export function writeJson(io: Pick<CommandIo, "stdout">, value: unknown): void {
  io.stdout.write(`${jsonText(value, 2)}\n`);
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
 * what to check when the server could not be reached. Never a stack trace, nor a control sequence (a
 * function's exception message is in the detail).
 */
export function describeError(error: unknown, context?: AuthContext): string {
  return stripTerminalControls(describeFailure(error, context));
}

function describeFailure(error: unknown, context: AuthContext | undefined): string {
  const hint = context && isRunplaneError(error) ? authHint(error, context) : undefined;
  if (hint) return hint;
  if (isRunplaneError(error)) {
    const { title, detail } = error.problem;
    const runId = error.runId ? ` (run ${error.runId})` : "";
    return `${title}${detail ? `: ${detail}` : ""}${runId}`;
  }
  if (error instanceof RunplaneConnectionError) {
    const key = error.idempotencyKey;
    return `Lost the connection to the server (${error.code}) before its answer, after one retry; the run may exist: repeat the command with --idempotency-key ${key} to get its id (it never runs twice), or see runplane runs list`;
  }
  if (!(error instanceof Error)) return String(error); // a thrown string, undefined, …
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  if (error instanceof TypeError && error.message === "fetch failed") {
    return `Cannot reach the server (${
      cause?.code ?? cause?.message ?? "network error"
    }): check --base-url/--api-url or RUNPLANE_BASE_URL/RUNPLANE_API_URL`;
  }
  return error.message || error.name;
}

/** The JSON form of a failure for `--json`: the problem document, or `{ title, detail }`. */
export function errorAsJson(error: unknown): unknown {
  return isRunplaneError(error) ? error.problem : { title: "Command failed", detail: describeError(error) };
}
