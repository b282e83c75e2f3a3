/**
 * WAL checkpoints off the event loop. SQLite's automatic checkpoint runs inside whichever commit crosses
 * the WAL's threshold: under load that commit copies a thousand pages and syncs the file, stalling the
 * event loop for several milliseconds every second or so. A worker thread with its own connection
 * checkpoints instead (PASSIVE: it never blocks the writer), and the writer's automatic checkpoint is
 * switched off while the worker runs.
 */
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** Options of `startCheckpointer`. */
export interface CheckpointerOptions {
  /** How often the worker checkpoints (default 200 ms). */
  intervalMs?: number;
  /**
   * Called when the worker failed or exited on its own: the caller should switch the automatic
   * checkpoint back on, so the WAL cannot grow without bound.
   */
  onLost(error: unknown): void;
}

/** A running checkpointer. */
export interface Checkpointer {
  /** Checkpoints once more, closes the worker's connection and ends the worker. */
  stop(): Promise<void>;
}

// CommonJS run by the worker: its own connection, a PASSIVE checkpoint per interval, one more on "stop".
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.path, { fileMustExist: true });
db.pragma("busy_timeout = 1000");
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)");
const timer = setInterval(() => checkpoint.run(), workerData.intervalMs);
parentPort.on("message", () => {
  clearInterval(timer);
  checkpoint.run();
  db.close();
  parentPort.close();
});
`;

/** Starts checkpointing the SQLite database at `path` (in WAL mode) from a worker thread. */
export function startCheckpointer(path: string, options: CheckpointerOptions): Checkpointer {
  const driver = createRequire(import.meta.url).resolve("better-sqlite3");
  const worker = new Worker(WORKER_SOURCE, {
    eval: true,
    workerData: { path, driver, intervalMs: options.intervalMs ?? 200 },
  });
  // The checkpoints alone must not hold a finished process open.
  worker.unref();
  let stopping = false;
  let lost = false;
  function lose(error: unknown): void {
    if (stopping || lost) return;
    lost = true;
    options.onLost(error);
  }
  const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
  worker.once("error", lose);
  worker.once("exit", (code) => lose(new Error(`The checkpoint worker exited with code ${code}`)));
  return {
    async stop() {
      if (stopping) return await exited;
      stopping = true;
      // Held open again until the worker's last checkpoint and close are done.
      worker.ref();
      worker.postMessage("stop");
      await exited;
    },
  };
}
