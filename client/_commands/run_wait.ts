import type { CommandIo } from "../cli_command.ts";
import { type RunplaneClient, TERMINAL_STATUSES } from "../mod.ts";
import { clearProgress, jsonText, showProgress, writeJson } from "./output.ts";
import { formatRun } from "./run_format.ts";

/**
 * Polls a run until it ends (its status on a terminal's progress line), then prints the result on
 * stdout, or the failed run on stderr; `json` prints the final record. Resolves with the exit code: 0
 * for success, else 1.
 */
export async function waitAndReport(
  io: CommandIo,
  client: RunplaneClient,
  target: { app: string; runId: string; json: boolean; signal?: AbortSignal },
): Promise<number> {
  const { runId } = target;
  const started = Date.now();
  const run = await client.waitForRun(target.app, runId, {
    signal: target.signal,
    onPoll(record) {
      if (!TERMINAL_STATUSES.includes(record.status)) {
        showProgress(io, `${runId} ${record.status} ${((Date.now() - started) / 1000).toFixed(1)} s`);
      }
    },
  });
  clearProgress(io);
  if (target.json) writeJson(io, run);
  else if (run.status === "success") io.stdout.write(`${jsonText(run.result, 2)}\n`);
  else io.stderr.write(`${formatRun(run)}\n`);
  return run.status === "success" ? 0 : 1;
}
