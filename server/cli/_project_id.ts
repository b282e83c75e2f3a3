import { existsSync } from "node:fs";
import { resolve } from "node:path";
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

/**
 * Throws a `UsageError` unless `dataDir` exists: a command that would create one (opening a store does)
 * would work on a data dir no server uses, e.g. mint a token every running server refuses.
 */
export function requireExistingDataDir(dataDir: string, command: string): void {
  if (existsSync(dataDir)) return;
  throw new UsageError(
    `${command} found no data dir at ${
      resolve(dataDir)
    } and creates none: pass --data-dir <dir> (or set RUNPLANE_DATA_DIR) with the data dir the server uses, or --base-url <url> (or set RUNPLANE_BASE_URL) to use a running server's REST API with an admin token`,
  );
}
