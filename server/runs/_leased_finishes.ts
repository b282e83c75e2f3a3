/**
 * The ends of the async runs this process ran under its lease, written together: ends reported while a
 * batch commits share the next one (one statement for the final states, their webhook deliveries, one
 * commit: `finishLeasedRuns`). On PostgreSQL each async run used to end in a transaction of its own
 * (BEGIN, UPDATE, COMMIT: three round trips and a WAL flush per run), which was most of the database's
 * work while draining a queue. A batch the store refuses is written again run by run, so that one run
 * it refuses does not fail the others.
 */
import type { Kysely } from "kysely";
import { createGroupCommit, type Database } from "../store/mod.ts";
import { finishLeasedRuns, type LeasedFinish } from "./_queries.ts";

/** Ends this process's async runs in shared commits. */
export interface LeasedFinishes {
  /**
   * Ends the run with its outcome (and webhook delivery) if it is still running under this process's
   * lease; resolves with false when it had been ended elsewhere first, once committed.
   */
  finish(finish: LeasedFinish): Promise<boolean>;
}

interface Pending {
  finish: LeasedFinish;
  ended?: boolean;
  error?: unknown;
}

/** Creates the shared writer of `owner`'s run ends on `db`. */
export function createLeasedFinishes(db: Kysely<Database>, owner: string): LeasedFinishes {
  async function writeEach(batch: Pending[]): Promise<void> {
    for (const pending of batch) {
      try {
        pending.ended = (await finishLeasedRuns(db, owner, [pending.finish])).has(pending.finish.run.run_id);
      } catch (error) {
        pending.error = error;
      }
    }
  }
  const commits = createGroupCommit<Pending>(async (batch) => {
    try {
      const ended = await finishLeasedRuns(db, owner, batch.map((pending) => pending.finish));
      for (const pending of batch) pending.ended = ended.has(pending.finish.run.run_id);
    } catch (error) {
      if (batch.length === 1) batch[0].error = error;
      else await writeEach(batch);
    }
  }, { maxInFlight: 1 });
  return {
    async finish(finish) {
      const pending: Pending = { finish };
      await commits.add(pending);
      if (pending.error !== undefined) throw pending.error;
      return pending.ended === true;
    },
  };
}
