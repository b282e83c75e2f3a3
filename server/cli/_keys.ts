import { UsageError } from "../../client/cli_command.ts";
import { type MasterKey, MASTER_KEY_HOWTO, parseMasterKey } from "../keys/mod.ts";

/**
 * The master key a command against `databaseUrl` needs (`RUNPLANE_MASTER_KEY`), or null on a data dir.
 * Throws a `UsageError` (exit 2) when it is missing or malformed, saying how to make one; never echoes it.
 */
export function masterKeyFor(
  databaseUrl: string | null | undefined,
  env: Record<string, string | undefined>,
): MasterKey | null {
  if (!databaseUrl) return null;
  const raw = env.RUNPLANE_MASTER_KEY ?? "";
  if (!raw.trim()) {
    throw new UsageError(
      `RUNPLANE_MASTER_KEY is not set: with --database-url the keys are kept in the database, sealed with the master key the server processes are given; ${MASTER_KEY_HOWTO}`,
    );
  }
  try {
    return parseMasterKey(raw);
  } catch (error) {
    throw new UsageError(`RUNPLANE_MASTER_KEY ${(error as Error).message}`);
  }
}
