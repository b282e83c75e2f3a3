/**
 * Group commit for accepted async runs: rows submitted in the same turn of the event loop are inserted
 * in one transaction, and each caller's promise settles once that transaction has committed. The 202
 * still follows the commit of its own record; many callers just share one commit.
 */
import type { Insertable, Kysely } from "kysely";
import type { Database, RunTable } from "../store/schema.ts";
import { insertRun } from "./_run_rows.ts";

/** The most rows one transaction takes; more wait for the next one. */
const BATCH_LIMIT = 256;

/** Inserts run rows in shared transactions. */
export interface GroupCommit {
  /** Resolves once `row` is committed; rejects when its transaction failed. */
  insert(row: Insertable<RunTable>): Promise<void>;
}

interface Pending {
  row: Insertable<RunTable>;
  resolve(): void;
  reject(error: unknown): void;
}

/** Creates a group committer over `db`. */
export function createGroupCommit(db: Kysely<Database>): GroupCommit {
  let pending: Pending[] = [];
  let scheduled = false;

  async function commit(): Promise<void> {
    scheduled = false;
    const batch = pending.splice(0, BATCH_LIMIT);
    if (pending.length) schedule();
    try {
      await db.transaction().execute(async (trx) => {
        for (const { row } of batch) await insertRun(trx, row);
      });
      for (const entry of batch) entry.resolve();
    } catch (error) {
      for (const entry of batch) entry.reject(error);
    }
  }

  function schedule(): void {
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => void commit());
  }

  return {
    insert(row) {
      return new Promise((resolve, reject) => {
        pending.push({ row, resolve, reject });
        schedule();
      });
    },
  };
}
