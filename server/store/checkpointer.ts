/**
 * WAL checkpoints off the event loop. SQLite's automatic checkpoint runs inside whichever commit crosses
 * the WAL's threshold: under load that commit copies a thousand pages and syncs the file, stalling the
 * event loop for several milliseconds every second or so. A worker thread with its own connection
 * checkpoints instead (PASSIVE: it never blocks the writer), and the writer's automatic checkpoint is
 * switched off while the worker runs. A checkpoint that fails (a full disk, the file not there yet) is
 * told once (`onLost`) and tried again every interval; the first that works again is told too (`onBack`).
 */
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** Options of `startCheckpointer`. */
export interface CheckpointerOptions {
  /** How often the worker checkpoints (default 200 ms). */
  intervalMs?: number;
  /**
   * Called when the worker's checkpoints fail, or it exited on its own: the caller should switch the
   * automatic checkpoint back on, so the WAL cannot grow without bound.
   */
  onLost(error: unknown): void;
  /**
   * Called when the worker checkpoints again after `onLost` (the disk has room again): the caller may
   * switch the automatic checkpoint off again. Never after the worker exited.
   */
  onBack?(): void;
}

/** A running checkpointer. */
export interface Checkpointer {
  /** Checkpoints once more, closes the worker's connection and ends the worker. */
  stop(): Promise<void>;
}

// CommonJS run by the worker: its own connection, a PASSIVE checkpoint per interval, one more on "stop".
// A failure (opening included) is posted once, and so is the first success after it: the worker goes on
// trying, so that it comes back when the store does.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
let db = null;
let checkpoint = null;
let failing = false;
function tick() {
  try {
    if (db === null) {
      const opened = new Database(workerData.path, { fileMustExist: true });
      opened.pragma("busy_timeout = 1000");
      checkpoint = opened.prepare("PRAGMA wal_checkpoint(PASSIVE)");
      db = opened;
    }
    checkpoint.run();
    if (failing) parentPort.postMessage({ ok: true });
    failing = false;
  } catch (error) {
    if (!failing) parentPort.postMessage({ ok: false, message: String((error && error.message) || error) });
    failing = true;
  }
}
tick();
const timer = setInterval(tick, workerData.intervalMs);
parentPort.on("message", () => {
  clearInterval(timer);
  tick();
  if (db !== null) db.close();
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
  let gone = false;
  function lose(error: unknown): void {
    if (stopping || lost) return;
    lost = true;
    options.onLost(error);
  }
  const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
  worker.on("message", (message: { ok: boolean; message?: string }) => {
    if (!message.ok) return lose(new Error(`The checkpoint worker cannot checkpoint: ${message.message}`));
    if (stopping || gone || !lost) return;
    lost = false;
    options.onBack?.();
  });
  worker.once("error", (error) => {
    gone = true;
    lose(error);
  });
  worker.once("exit", (code) => {
    gone = true;
    lose(new Error(`The checkpoint worker exited with code ${code}`));
  });
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
