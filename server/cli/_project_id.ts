import { UsageError } from "../../client/cli_command.ts";

const PROJECT_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** The `--project` value of `command`, checked; throws a `UsageError` when missing or malformed. */
export function requireProjectId(value: string | undefined, command: string): string {
  if (!value) throw new UsageError(`${command} needs --project <id>`);
  if (!PROJECT_ID.test(value)) {
    throw new UsageError(`Invalid project id "${value}": use lowercase letters, digits and dashes`);
  }
  return value;
}

/** The data dir a command works on: `--data-dir`, else `RUNPLANE_DATA_DIR`, else `./.runplane`. */
export function dataDirOf(flag: string | undefined, env: Record<string, string | undefined>): string {
  return flag ?? env.RUNPLANE_DATA_DIR ?? "./.runplane";
}
