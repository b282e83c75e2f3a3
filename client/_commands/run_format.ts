import type { Run } from "../mod.ts";
import { plural } from "../plural.ts";
import { stripTerminalControls } from "../terminal_text.ts";

/** Milliseconds for people, or `-` when not known (yet). */
export function milliseconds(value: number | null): string {
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
  if (run.deployment_id) lines.push(`deployment: ${run.deployment_id}`);
  if (run.rerun_of) lines.push(`rerun of: ${run.rerun_of}`);
  if (run.reruns.length) lines.push(`rerun as: ${run.reruns.join(", ")}`);
  if (run.webhook) {
    lines.push(
      `webhook: ${run.webhook.status} (${plural(run.webhook.attempts.length, "attempt")}) ${run.webhook.endpoint}`,
    );
  }
  return stripTerminalControls(lines.join("\n"));
}
