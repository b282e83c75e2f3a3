/**
 * The ends of the async runs this process ran under its lease, written together: ends reported while a
 * batch commits share the next one (one statement for the final states, their webhook deliveries, one
 * commit: `finishLeasedRuns`). On PostgreSQL each async run used to end in a transaction of its own
 * (BEGIN, UPDATE, COMMIT: three round trips and a WAL flush per run), which was most of the database's
 * work while draining a queue. A batch the store refuses is written again run by run, so that one run
 * it refuses does not fail the others; a run whose end still cannot be written is tried again, with a
 * growing pause, until it is written or found ended elsewhere. Giving up would leave it `running` under
 * a lease this process keeps renewing: a run that never ends. If the process stops first, its lease runs
 * out and another process ends it `interrupted`.
 */
import type { Kysely } from "kysely";
import { createGroupCommit, type Database } from "../store/mod.ts";
import { type EndToStore, finishLeasedRuns } from "./_queries.ts";

/** Ends this process's async runs in shared commits. */
export interface LeasedFinishes {
  /**
   * Stores the run's end (and webhook delivery) if it is still running under this process's lease, in
   * the generation it was claimed in; resolves with false, having written nothing, when it had been
   * ended (or claimed again) elsewhere first (a run ends once), once committed.
   */
  finish(end: EndToStore): Promise<boolean>;
}

/** Options of `createLeasedFinishes`. */
export interface LeasedFinishesOptions {
  /** The first pause before a refused end is tried again; it doubles up to 5 s (default 100 ms). */
  retryMs?: number;
  /** Told once per run when its end could not be written and will be tried again. */
  onRetry?(error: unknown, runId: string): void;
}

interface Pending {
  finish: EndToStore;
  ended?: boolean;
  error?: unknown;
}

const MAX_RETRY_MS = 5_000;

/** Creates the shared writer of `owner`'s run ends on `db`. */
export function createLeasedFinishes(
  db: Kysely<Database>,
  owner: string,
  options: LeasedFinishesOptions = {},
): LeasedFinishes {
  const firstRetryMs = options.retryMs ?? 100;
  async function writeOne(finish: EndToStore): Promise<boolean> {
    return (await finishLeasedRuns(db, owner, [finish])).has(finish.runId);
  }
  const commits = createGroupCommit<Pending>(async (batch) => {
    try {
      const ended = await finishLeasedRuns(db, owner, batch.map((pending) => pending.finish));
      for (const pending of batch) pending.ended = ended.has(pending.finish.runId);
    } catch (error) {
      if (batch.length === 1) batch[0].error = error;
      else {
        for (const pending of batch) {
          try {
            pending.ended = await writeOne(pending.finish);
          } catch (error) {
            pending.error = error;
          }
        }
      }
    }
  }, { maxInFlight: 1 });

  /** Tries `finish` alone until it is written (or found ended elsewhere). */
  async function retry(finish: EndToStore, error: unknown): Promise<boolean> {
    options.onRetry?.(error, finish.runId);
    for (let pauseMs = firstRetryMs;; pauseMs = Math.min(pauseMs * 2, MAX_RETRY_MS)) {
      // Unreferenced: a stopping process is not held open by a store that does not answer.
      await new Promise((resolve) => setTimeout(resolve, pauseMs).unref());
      try {
        return await writeOne(finish);
      } catch {
        // Told once; the lease keeps the run this process's meanwhile.
      }
    }
  }

  return {
    async finish(finish) {
      const pending: Pending = { finish };
      await commits.add(pending);
      if (pending.error !== undefined) return await retry(finish, pending.error);
      return pending.ended === true;
    },
  };
}
