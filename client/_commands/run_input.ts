import { readFile } from "node:fs/promises";
import { UsageError } from "../cli_command.ts";

/**
 * The function's input from `--data`: JSON text, or `@path` of a JSON file; an empty object when absent.
 * A `UsageError` when it cannot be read or is not a JSON object.
 */
export async function readInput(data: string | undefined): Promise<Record<string, unknown>> {
  if (data === undefined) return {};
  let text = data;
  if (data.startsWith("@")) {
    try {
      text = await readFile(data.slice(1), "utf8");
    } catch (error) {
      throw new UsageError(
        `Cannot read ${data.slice(1)} (${(error as NodeJS.ErrnoException).code}): give --data @<path to a JSON file>`,
      );
    }
  }
  let input: unknown;
  try {
    input = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--data is not JSON (${(error as Error).message}): give an object such as '{"name": "Ada"}'`);
  }
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new UsageError("--data must be a JSON object: its members are the function's arguments");
  }
  return input as Record<string, unknown>;
}
