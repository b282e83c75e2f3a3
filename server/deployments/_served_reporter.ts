/**
 * Tells the store which deployment this process serves for each app (what `getApp` lists as
 * `served_by`): written when it changes, renewed at every heartbeat (which also deletes the rows of
 * processes whose heartbeat is old), removed when the process stops cleanly.
 */
import type { Kysely } from "kysely";
import type { Logger } from "../log.ts";
import type { Database } from "../store/mod.ts";
import { deleteServed, deleteStaleServed, replaceServed, type ServedRow } from "./_served_records.ts";

/** How often a process renews its rows. */
export const SERVED_HEARTBEAT_MS = 10_000;
/** A row not renewed for this long belongs to a stopped process: not shown, and deleted. */
export const SERVED_STALE_MS = 60_000;

/** One app as this process serves it. */
export interface ServedApp {
  projectId: string;
  appId: string;
  deploymentId: string;
  /** When this process began serving the deployment (store clock). */
  since: number;
}

/** Options of `startServedReporter`. */
export interface ServedReporterOptions {
  db: Kysely<Database>;
  logger: Logger;
  /** This process's id (its lease owner id). */
  processId: string;
  host: string;
  /** The store's clock. */
  now(): number;
  heartbeatMs?: number;
  staleMs?: number;
}

/** The reporter of one process. */
export interface ServedReporter {
  /** Records `apps` as all this process serves; resolves once written (a failure is logged, not thrown). */
  report(apps: ServedApp[]): Promise<void>;
  /** Stops the heartbeat and removes this process's rows. */
  stop(): Promise<void>;
}

/** Starts reporting (nothing is written before the first `report`). */
export function startServedReporter(options: ServedReporterOptions): ServedReporter {
  const { db, logger, processId } = options;
  const staleMs = options.staleMs ?? SERVED_STALE_MS;
  let latest: ServedApp[] | undefined;
  let writes: Promise<void> = Promise.resolve();
  let stopped = false;

  async function write(): Promise<void> {
    if (!latest || stopped) return;
    const now = options.now();
    const rows: ServedRow[] = latest.map((app) => ({
      process_id: processId,
      project_id: app.projectId,
      app_id: app.appId,
      deployment_id: app.deploymentId,
      host: options.host,
      since: app.since,
      seen_at: now,
    }));
    try {
      await replaceServed(db, processId, rows);
    } catch (error) {
      logger.warn({ err: error }, "recording the deployments this process serves failed; the next heartbeat retries");
    }
  }

  // Writes run one at a time, each with the latest list: a later report is never overwritten by an older one.
  function queueWrite(): Promise<void> {
    writes = writes.then(write);
    return writes;
  }

  const heartbeat = setInterval(() => {
    void queueWrite();
    deleteStaleServed(db, options.now() - staleMs).then(
      (deleted) => deleted && logger.info({ rows: deleted }, "forgot the served deployments of stopped processes"),
      (error) => logger.warn({ err: error }, "deleting stopped processes' served deployments failed"),
    );
  }, options.heartbeatMs ?? SERVED_HEARTBEAT_MS);
  heartbeat.unref();

  return {
    report(apps) {
      latest = apps;
      return queueWrite();
    },
    async stop() {
      stopped = true;
      clearInterval(heartbeat);
      await writes;
      await deleteServed(db, processId).catch((error) =>
        logger.warn({ err: error }, "removing this process's served deployments failed; they expire by themselves")
      );
    },
  };
}
