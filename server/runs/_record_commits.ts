/**
 * How the write-behind's batches reach the store (`./_write_behind.ts` buffers them): one transaction a
 * batch, the runs never written before inserted and the others upserted, each final state's webhook
 * delivery with it. A batch the store refuses is retried run by run (so one refused run does not fail
 * the others), a few times with backoff. A run that still cannot be written is reported (its waiter
 * rejects with `RecordNotStored`, `onError` is told) and kept in memory, retried in the background until
 * it is written or the process stops; a bounded number are kept, and one given up is told to `onLost`.
 *
 * A run ends once: a final state is written only over the run's own `running` row (the upsert compares
 * status, lease generation and owner in its one statement), and its delivery only in the transaction
 * that wrote it. A run found ended elsewhere (a lease rescue while this process was blocked) keeps that
 * end: its final state here is dropped, its waiter rejects with `RunEndedElsewhere`, `onDropped` is told.
 */
import type { Insertable, Kysely } from "kysely";
import { type Database, isTerminal } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import { insertAllNewRuns, insertNewRuns, upsertRuns } from "../store/statements/run_rows.ts";
import { type ClaimedDelivery, type DeliveryHandOff, type NewDelivery, putEndDelivery } from "../webhooks/mod.ts";
import { selectStoredEnds, type StoredEnd } from "./_queries.ts";

/** Raised to whoever waits for a run's record when the store did not take it after the retries. */
export class RecordNotStored extends Error {
  readonly runId: string;
  constructor(runId: string, options: { cause: unknown }) {
    super(`The record of run ${runId} could not be stored`, options);
    this.name = "RecordNotStored";
    this.runId = runId;
  }
}

/**
 * Raised to whoever waits for a run's record when the run had been ended elsewhere first (a lease rescue
 * while this process could not reach the store): its final state here was dropped, `stored` stands.
 */
export class RunEndedElsewhere extends Error {
  readonly runId: string;
  readonly stored: StoredEnd;
  constructor(runId: string, stored: StoredEnd) {
    super(`Run ${runId} was ended ${stored.status} elsewhere before its outcome was stored here`);
    this.name = "RunEndedElsewhere";
    this.runId = runId;
    this.stored = stored;
  }
}

/** What a writer that lost a run's end to another process dropped, and what is stored instead. */
export interface DroppedEnd {
  /** The final row this process would have written. */
  dropped: Insertable<RunTable>;
  stored: StoredEnd;
}

/** One run's state to write. */
export interface RecordEntry {
  row: Insertable<RunTable>;
  delivery?: NewDelivery;
  /** No state of the run was handed to a write before this one: it is inserted, not upserted. */
  first?: boolean;
  /** Set once the run was reported and kept: later background retries do not report it again. */
  kept?: true;
}

/** Options of `RecordCommits`. */
export interface RecordCommitsOptions {
  /** The lease owner of this process's runs: a stored run another owner holds is never overwritten. */
  owner: string;
  /** The store's clock: when deliveries are made and due (default the process's). */
  now?: () => number;
  /** Pauses before each retry of a refused write, run by run (default 20, 100 and 500 ms). */
  retryDelaysMs?: readonly number[];
  /** The first pause before a kept run is tried again in the background; it doubles up to 5 s (default 1 s). */
  keptRetryMs?: number;
  /** The most runs kept for a later retry; past it the oldest is given up (default 1,000). */
  keptLimit?: number;
  /** Called after a batch holding deliveries for the outbox (not handed off) was committed. */
  onDeliveries(): void;
  /** This process's delivery worker: deliveries are stored leased to it and handed to it after the commit. */
  handOff?: DeliveryHandOff;
  /** A run's record could not be written after the retries; it is kept and retried in the background (told once). */
  onError(error: unknown, runId: string): void;
  /** A kept run's record was given up (too many kept, or the process stopped): it is not stored. */
  onLost(error: unknown, runId: string): void;
  /** A run's final state was dropped: the run had been ended elsewhere first (told once per run). */
  onDropped?(runId: string, end: DroppedEnd): void;
  /** Whether a newer state of the run waits in the buffer: a refused older one is then not kept. */
  superseded(runId: string): boolean;
}

interface Waiter {
  resolve(): void;
  reject(error: unknown): void;
}

// A kept run's record is written at most 5 s after the store is back (one small transaction per try:
// cheap to repeat through an outage, and a caller told to check getRun finds it soon).
const MAX_KEPT_RETRY_MS = 5_000;

/**
 * The final states among `entries` that were not written because their run had been ended otherwise, with
 * the stored end: read only when a final state was not written (no round trip otherwise). The same end
 * stored already (this write's twin, committed by a try whose answer was lost) is not dropped.
 */
async function droppedEnds(
  trx: Kysely<Database>,
  entries: readonly RecordEntry[],
  written: ReadonlySet<string>,
): Promise<Map<string, DroppedEnd>> {
  const dropped = new Map<string, DroppedEnd>();
  const unwritten = entries.filter((entry) => isTerminal(entry.row.status) && !written.has(entry.row.run_id));
  if (unwritten.length === 0) return dropped;
  const stored = await selectStoredEnds(trx, unwritten.map((entry) => entry.row.run_id));
  for (const { row } of unwritten) {
    const end = stored.get(row.run_id);
    if (!end) continue;
    const twin = end.status === row.status && Number(end.completed_at) === Number(row.completed_at);
    if (!twin) dropped.set(row.run_id, { dropped: row, stored: end });
  }
  return dropped;
}

/** A run written for the first time was stored already: its batch's transaction is rolled back and runs again. */
class StoredBefore extends Error {}

/** Writes batches one after the other, in the order they are handed over. */
export class RecordCommits {
  readonly #db: Kysely<Database>;
  readonly #options: RecordCommitsOptions;
  readonly #waiters = new Map<string, Waiter>();
  // Runs whose record the store refused, oldest first, with the last error.
  readonly #kept = new Map<string, RecordEntry & { error: unknown }>();
  #keptRetryMs: number;
  #keptTimer: NodeJS.Timeout | undefined;
  #closed = false;
  #chain: Promise<void> = Promise.resolve();

  constructor(db: Kysely<Database>, options: RecordCommitsOptions) {
    this.#db = db;
    this.#options = options;
    this.#keptRetryMs = options.keptRetryMs ?? 1_000;
  }

  /** Writes `entries` after the batches handed over before; resolves once written or kept (never rejects). */
  enqueue(entries: RecordEntry[]): Promise<void> {
    this.#chain = this.#chain.then(() => this.#commit(entries)).catch((error: unknown) => {
      // Only a throwing callback gets here; nobody may wait forever for these runs.
      for (const entry of entries) this.#settle(entry.row.run_id, error);
    });
    return this.#chain;
  }

  /** Resolves once the batches handed over so far are written or kept. */
  idle(): Promise<void> {
    return this.#chain;
  }

  /** Resolves once `runId`'s next batch committed; rejects with `RecordNotStored` when it could not be. */
  waitFor(runId: string): Promise<void> {
    return new Promise<void>((resolve, reject) => this.#waiters.set(runId, { resolve, reject }));
  }

  /** Forgets a kept state of `runId`: a newer one was put. */
  forget(runId: string): void {
    this.#kept.delete(runId);
  }

  /** Stops the background retries, tries the kept runs once more, and reports those still unwritten as lost. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#keptTimer) clearTimeout(this.#keptTimer);
    this.#keptTimer = undefined;
    await this.#chain;
    if (this.#kept.size) {
      const entries = [...this.#kept.values()];
      this.#kept.clear();
      await this.enqueue(entries);
    }
    for (const [runId, entry] of this.#kept) this.#options.onLost(entry.error, runId);
    this.#kept.clear();
  }

  /**
   * Writes `entries` in one transaction; resolves with the final states it dropped (ended elsewhere
   * first). The runs written for the first time are inserted without reading back which were (the rare
   * run stored already, by a try whose answer was lost, rolls the transaction back and it runs again,
   * reading them back).
   */
  async #write(entries: RecordEntry[]): Promise<Map<string, DroppedEnd>> {
    try {
      return await this.#writeOnce(entries, { firstAllNew: true });
    } catch (error) {
      if (!(error instanceof StoredBefore)) throw error;
      return await this.#writeOnce(entries, { firstAllNew: false });
    }
  }

  async #writeOnce(entries: RecordEntry[], options: { firstAllNew: boolean }): Promise<Map<string, DroppedEnd>> {
    const { handOff } = this.#options;
    const handed: ClaimedDelivery[] = [];
    let stored = 0;
    const dropped = await this.#db.transaction().execute(async (trx) => {
      const written = await this.#writeRows(trx, entries, options);
      const now = (this.#options.now ?? Date.now)();
      for (const { delivery } of entries) {
        // A run that had ended otherwise keeps that end's delivery: this write's twin after an unsure
        // commit, or another process's end (a lease rescue). Inserted here, in the guarded write's
        // transaction, or not at all.
        if (!delivery || !written.has(delivery.runId)) continue;
        const lease = handOff?.lease(now, delivery.endpoint) ?? undefined;
        const put = await putEndDelivery(trx, delivery, { now, lease });
        if (put === "leased") {
          handed.push({
            run_id: delivery.runId,
            endpoint: delivery.endpoint,
            body: delivery.body,
            secret: delivery.sealedSecret,
            credentials: delivery.sealedCredentials,
            attempts: 0,
            created_at: now,
          });
        } else if (put === "queued") stored++;
      }
      return await droppedEnds(trx, entries, written);
    });
    if (handed.length) handOff!.take(handed);
    if (stored) this.#options.onDeliveries();
    return dropped;
  }

  /**
   * Inserts the runs written for the first time and upserts the others; the ids of the runs written.
   * With `firstAllNew`, throws `StoredBefore` when a first write's run was stored already.
   */
  async #writeRows(
    trx: Kysely<Database>,
    entries: RecordEntry[],
    options: { firstAllNew: boolean },
  ): Promise<Set<string>> {
    const first: Array<Insertable<RunTable>> = [];
    const others: Array<Insertable<RunTable>> = [];
    for (const entry of entries) (entry.first ? first : others).push(entry.row);
    let written: Set<string>;
    if (!options.firstAllNew) written = await insertNewRuns(trx, first);
    else if (await insertAllNewRuns(trx, first)) written = new Set(first.map((row) => row.run_id));
    else throw new StoredBefore();
    for (const runId of await upsertRuns(trx, others, this.#options.owner)) written.add(runId);
    return written;
  }

  #settle(runId: string, error?: unknown): void {
    if (error === undefined) this.#answer(runId, undefined);
    else this.#answer(runId, new RecordNotStored(runId, { cause: error }));
  }

  /** Settles `runId`'s waiter: resolved without `error`, else rejected with it. */
  #answer(runId: string, error: Error | undefined): void {
    const waiter = this.#waiters.get(runId);
    if (!waiter) return;
    this.#waiters.delete(runId);
    if (error === undefined) waiter.resolve();
    else waiter.reject(error);
  }

  #keep(entry: RecordEntry, error: unknown): void {
    const runId = entry.row.run_id;
    // A retry of an older state (the run's `running` row, taken from `kept` before its end was kept)
    // that failed again must not replace the end kept meanwhile: the end would never be written, and
    // the `running` row, once written, would keep its lease renewed for ever.
    const kept = this.#kept.get(runId);
    if (kept !== undefined && isTerminal(kept.row.status) && !isTerminal(entry.row.status)) return;
    this.#kept.delete(runId);
    this.#kept.set(runId, { ...entry, kept: true, error });
    if (!entry.kept) this.#options.onError(error, runId);
    while (this.#kept.size > (this.#options.keptLimit ?? 1_000)) {
      const [oldest, lost] = this.#kept.entries().next().value!;
      this.#kept.delete(oldest);
      this.#options.onLost(lost.error, oldest);
    }
    if (!this.#closed && !this.#keptTimer) {
      this.#keptTimer = setTimeout(() => this.#retryKept(), this.#keptRetryMs);
      // A stopping process tries its kept runs in `close()`; the timer alone must not hold it open.
      this.#keptTimer.unref();
    }
  }

  /** Writes `entries` in one transaction, else run by run with retries; keeps those that still fail. */
  async #commit(entries: RecordEntry[]): Promise<void> {
    let failing: RecordEntry[];
    let errors = new Map<string, unknown>();
    const dropped = new Map<string, DroppedEnd>();
    try {
      for (const [runId, end] of await this.#write(entries)) dropped.set(runId, end);
      failing = [];
    } catch (error) {
      failing = entries;
      for (const entry of entries) errors.set(entry.row.run_id, error);
    }
    for (const delayMs of this.#options.retryDelaysMs ?? [20, 100, 500]) {
      if (failing.length === 0) break;
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      const still: RecordEntry[] = [];
      const stillErrors = new Map<string, unknown>();
      for (const entry of failing) {
        try {
          for (const [runId, end] of await this.#write([entry])) dropped.set(runId, end);
        } catch (error) {
          still.push(entry);
          stillErrors.set(entry.row.run_id, error);
        }
      }
      failing = still;
      errors = stillErrors;
    }
    const failed = new Set(failing.map((entry) => entry.row.run_id));
    for (const [runId, end] of dropped) {
      this.#options.onDropped?.(runId, end);
      this.#answer(runId, new RunEndedElsewhere(runId, end.stored));
    }
    for (const entry of entries) {
      const runId = entry.row.run_id;
      if (!failed.has(runId) && !dropped.has(runId)) this.#settle(runId);
    }
    for (const entry of failing) {
      const error = errors.get(entry.row.run_id);
      if (!this.#options.superseded(entry.row.run_id)) this.#keep(entry, error);
      this.#settle(entry.row.run_id, error);
    }
  }

  #retryKept(): void {
    this.#keptTimer = undefined;
    if (this.#closed || this.#kept.size === 0) return;
    const entries = [...this.#kept.values()];
    this.#kept.clear();
    const before = entries.length;
    const first = this.#options.keptRetryMs ?? 1_000;
    void this.enqueue(entries).then(() => {
      // Back off while the store keeps refusing; start over once it took something.
      this.#keptRetryMs = this.#kept.size < before ? first : Math.min(this.#keptRetryMs * 2, MAX_KEPT_RETRY_MS);
    });
  }
}
