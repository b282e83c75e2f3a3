/**
 * The composition root's first step: the data dir made and kept private, the store opened on its engine,
 * the outage record that quiets the background loops while the store is away, and the process's keys.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { type Config, ConfigError } from "../config.ts";
import { prepareDataDir } from "../data_dir.ts";
import type { HostRole } from "../host/mod.ts";
import { keysBootstrap, loadKeys, MasterKeyError, type ProcessKeys } from "../keys/mod.ts";
import type { Logger } from "../log.ts";
import {
  createStoreOutage,
  openStore,
  quietDuringOutages,
  type Store,
  type StoreOutage,
  writeProbe,
} from "../store/mod.ts";

/** Options of `openServerStore`. */
export interface ServerStoreOptions {
  /** The server's logger (its background loops get a quieter one: `ServerStore.logger`). */
  logger: Logger;
  /** This process's lease owner id: the outage probe writes as it. */
  owner: string;
  /** A worker leaves WAL checkpoints to its supervisor and relays wake-ups through it (SQLite). */
  role?: HostRole;
  /** The host clock the store corrects (tests move it); default `Date.now`. */
  localNow?: () => number;
}

/** The opened store and what goes with it. */
export interface ServerStore {
  store: Store;
  outage: StoreOutage;
  /** The logger from here on: a background loop's failure that is the store being away counts toward the outage. */
  logger: Logger;
  keys: ProcessKeys;
  /** True when the data dir had no store before (PostgreSQL: the schema was just created). */
  freshDataDir: boolean;
}

/**
 * Makes the data dir and keeps it private (a `DataDirError` when it cannot be written or made private),
 * opens the store and loads the keys; a missing or wrong master key is a `ConfigError` (exit 2 at start).
 */
export async function openServerStore(config: Config, options: ServerStoreOptions): Promise<ServerStore> {
  const { logger: rootLogger, owner, role } = options;
  prepareDataDir(config.dataDir, { logger: rootLogger });
  const freshSqliteFile = !existsSync(join(config.dataDir, "runplane.sqlite3"));
  // Made once the store is open (its probe writes there); the store's errors before then are logged.
  let storeOutage: StoreOutage | undefined;
  const store = await openStore(config.dataDir, {
    databaseUrl: config.databaseUrl,
    bootstrap: keysBootstrap(config.masterKey),
    poolSize: config.databasePoolSize,
    preparedStatements: config.databasePreparedStatements,
    statementTimeoutMs: config.databaseStatementTimeoutMs,
    localNow: options.localNow,
    onError(error) {
      if (storeOutage?.refused(error)) return;
      rootLogger.warn({ err: error }, "a background database operation failed; the store carries on");
    },
    checkpoints: role?.kind === "worker" ? "elsewhere" : "background",
    relay: config.databaseUrl ? undefined : role?.relay,
    onCheckpointerLost: (error) =>
      rootLogger.error({ err: error }, "the WAL checkpoint worker failed; checkpoints run in commits again"),
    onCheckpointerBack: () =>
      rootLogger.info("the WAL checkpoint worker checkpoints again; commits no longer checkpoint"),
  }).catch(asConfigError);
  // With PostgreSQL the data dir holds no store: "fresh" means the schema was just created.
  const freshDataDir = store.shared ? store.fresh : freshSqliteFile;
  rootLogger.info({ engine: store.engine, database: store.path }, "store opened");
  storeOutage = createStoreOutage({ logger: rootLogger, probe: () => writeProbe(store.db, owner, store.clock.now()) });
  const outage = storeOutage;
  // From here on, a background loop's failure that is the store being away counts toward the outage
  // (logged once when it starts and once when it ends) instead of a line per loop and tick.
  const logger = quietDuringOutages(rootLogger, outage);
  let keys: ProcessKeys;
  try {
    keys = await loadKeys(store, { dataDir: config.dataDir, masterKey: config.masterKey });
  } catch (error) {
    await store.close();
    return asConfigError(error);
  }
  return { store, outage, logger, keys, freshDataDir };
}

/** Rethrows a missing or wrong master key as the bad setting it is (exit 2 at start); anything else as is. */
function asConfigError(error: unknown): never {
  if (error instanceof MasterKeyError) throw new ConfigError([error.message]);
  throw error;
}
