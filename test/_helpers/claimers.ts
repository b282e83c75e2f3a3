/**
 * Concurrent claimers for claim tests: several stores opened on one database (each its own pool on
 * PostgreSQL, its own connection on SQLite), each looping over a claim until nothing is left.
 */
import { openStore, type Store } from "../../server/store/mod.ts";
import type { TestStore } from "./postgres.ts";

/**
 * Opens `count` more stores on the test store's database (without migrating again), with prepared
 * statements as the server has them.
 */
export async function openClaimerStores(t: TestStore, count: number): Promise<Store[]> {
  return await Promise.all(
    Array.from(
      { length: count },
      () => openStore(t.dataDir, { databaseUrl: t.databaseUrl, poolSize: 2, migrate: false, preparedStatements: true }),
    ),
  );
}

/** What one claimer took, claim by claim. */
export interface ClaimerRecord {
  owner: string;
  /** Each claim's limit and the ids it returned. */
  claims: Array<{ limit: number; ids: string[] }>;
}

/**
 * Runs one loop per store at once: each claims with a limit from 1 to `maxLimit` (varying) until a
 * claim comes back empty and `remaining()` says nothing is left. Resolves with every claimer's record.
 */
export async function claimConcurrently(
  stores: readonly Store[],
  options: {
    maxLimit: number;
    claim(store: Store, claim: { owner: string; limit: number }): Promise<string[]>;
    remaining(store: Store): Promise<number>;
  },
): Promise<ClaimerRecord[]> {
  return await Promise.all(stores.map(async (store, i) => {
    const record: ClaimerRecord = { owner: `claimer-${i}`, claims: [] };
    for (let n = 0;; n++) {
      const limit = 1 + ((i + n) % options.maxLimit);
      const ids = await options.claim(store, { owner: record.owner, limit });
      record.claims.push({ limit, ids });
      if (ids.length === 0 && await options.remaining(store) === 0) return record;
    }
  }));
}

/** Every id claimed (with repeats, if a row was claimed twice), and claims that exceeded their limit. */
export function tally(records: readonly ClaimerRecord[]): {
  ids: string[];
  overLimit: Array<{ owner: string; limit: number; got: number }>;
  claimers: number;
} {
  const ids: string[] = [];
  const overLimit: Array<{ owner: string; limit: number; got: number }> = [];
  let claimers = 0;
  for (const record of records) {
    let took = 0;
    for (const claim of record.claims) {
      ids.push(...claim.ids);
      took += claim.ids.length;
      if (claim.ids.length > claim.limit) {
        overLimit.push({ owner: record.owner, limit: claim.limit, got: claim.ids.length });
      }
    }
    if (took > 0) claimers++;
  }
  return { ids, overLimit, claimers };
}
