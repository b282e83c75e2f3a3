import { parseArgs } from "node:util";
import { type Config, SETTINGS } from "../../server/config.ts";
import { serve } from "../../server/main.ts";
import type { CommandIo } from "./usage.ts";

/** Help of `runplane serve`, listing every setting with its variable and default. */
export function serveHelp(): string {
  const rows = SETTINGS.map((s) =>
    `  ${s.flag.padEnd(18)} ${s.env.padEnd(32)} ${s.description} (default: ${s.default})`
  );
  return `Usage: runplane serve [flags]\n\nEvery setting comes from its flag, else its environment variable, else its default:\n\n${
    rows.join("\n")
  }`;
}

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
