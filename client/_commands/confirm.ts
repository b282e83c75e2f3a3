import { createInterface } from "node:readline";
import { type CommandIo, UsageError } from "../cli_command.ts";

/** The flag that answers yes for scripts. */
export const YES_OPTION = { yes: { type: "boolean", short: "y", default: false } } as const;

/**
 * Asks `question` on a terminal and resolves once it is answered yes; throws (exit 1) on any other
 * answer. `yes` (the `--yes` flag) skips the question. Without a terminal to ask on and without `--yes`
 * it refuses (exit 2): a script must say it means it, not get a deletion by default.
 */
export async function confirm(io: CommandIo, question: string, options: { yes: boolean; what: string }): Promise<void> {
  if (options.yes) return;
  const input = io.stdin ?? process.stdin;
  if ((input as { isTTY?: boolean }).isTTY !== true) {
    throw new UsageError(
      `Not deleting ${options.what} without a confirmation: there is no terminal to ask on; pass --yes`,
    );
  }
  const lines = createInterface({ input, output: io.stderr, terminal: false });
  io.stderr.write(`${question} [y/N] `);
  const answer = await new Promise<string>((resolve) => {
    lines.once("line", resolve);
    lines.once("close", () => resolve(""));
  }).finally(() => lines.close());
  if (!/^\s*y(es)?\s*$/i.test(answer)) throw new Error(`Cancelled: ${options.what} was not deleted`);
}
