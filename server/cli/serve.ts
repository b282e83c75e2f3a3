import { parseArgs } from "node:util";
import type { CommandIo } from "../../client/cli_command.ts";
import { type Config, SETTINGS } from "../config.ts";
import { serve } from "../main.ts";

/** `runplane serve`: runs the server until SIGINT or SIGTERM. */
export async function serveCommand(io: CommandIo): Promise<number> {
  const options = Object.fromEntries(SETTINGS.map((s) => [s.flag.slice(2), { type: "string" as const }]));
  const { values } = parseArgs({ args: io.args, options });
  const overrides: Partial<Record<keyof Config, string>> = {};
  for (const setting of SETTINGS) {
    const value = values[setting.flag.slice(2)];
    if (typeof value === "string") overrides[setting.key] = value;
  }
  await serve(overrides);
  return await new Promise<number>(() => {});
}
