/**
 * Deferred, batched writes of sync and stream run records, so recording a run never adds a store write
 * to a sync call's path. Writes of the same run coalesce (a call that ends within the batch window is
 * written once, in its final state); one transaction per batch. A run already ended by someone else
 * (e.g. marked `interrupted`) is not overwritten.
 */
import type { Insertable, Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import type { RunTable } from "../store/schema.ts";
import { type ClaimedDelivery, type DeliveryHandOff, enqueueDelivery, type NewDelivery } from "../webhooks/mod.ts";
import { upsertRun } from "./_run_rows.ts";

/** The write-behind buffer. */
export interface WriteBehind {
  /** Buffers the run's full row (and its webhook delivery, for a final state); replaces an earlier one. */
  put(row: Insertable<RunTable>, delivery?: NewDelivery): void;
  /** Writes everything buffered now; resolves once it is committed. */
  flush(): Promise<void>;
  /**
   * Writes the final states with deliveries buffered at the end of this event-loop turn (other rows
   * keep waiting for the batch window): every caller in the turn shares one transaction; resolves once
   * it has committed.
   */
  flushSoon(): Promise<void>;
}

/** Options of `createWriteBehind`. */
export interface WriteBehindOptions {
  /** The batch window (default 25 ms). */
  delayMs?: number;
  /** Called after a batch holding deliveries for the outbox (not handed off) was committed. */
  onDeliveries(): void;
  /** This process's delivery worker: deliveries are stored leased to it and handed to it after the commit. */
  handOff?: DeliveryHandOff;
  onError(error: unknown): void;
}

/** Creates the buffer over `db`. */
export function createWriteBehind(db: Kysely<Database>, options: WriteBehindOptions): WriteBehind {
  let rows = new Map<string, Insertable<RunTable>>();
  let deliveries = new Map<string, NewDelivery>();
  let timer: NodeJS.Timeout | undefined;
  let chain: Promise<void> = Promise.resolve();

  async function write(batch: Map<string, Insertable<RunTable>>, outbox: Map<string, NewDelivery>): Promise<void> {
    const handed: ClaimedDelivery[] = [];
    let stored = 0;
    await db.transaction().execute(async (trx) => {
      for (const row of batch.values()) await upsertRun(trx, row);
      const now = Date.now();
      for (const delivery of outbox.values()) {
        const lease = options.handOff?.lease(now) ?? undefined;
        if (!(await enqueueDelivery(trx, delivery, { now, lease }))) continue;
        if (lease) {
          handed.push({
            run_id: delivery.runId,
            endpoint: delivery.endpoint,
            body: delivery.body,
            secret: delivery.sealedSecret,
            credentials: delivery.sealedCredentials,
            attempts: 0,
            created_at: now,
          });
        } else stored++;
      }
    });
    if (handed.length) options.handOff!.take(handed);
    if (stored) options.onDeliveries();
  }

  function flush(): Promise<void> {
    if (timer) clearTimeout(timer);
    timer = undefined;
    if (rows.size === 0) return chain;
    const batch = rows;
    const outbox = deliveries;
    rows = new Map();
    deliveries = new Map();
    chain = chain.then(() => write(batch, outbox)).catch(options.onError);
    return chain;
  }

  /** Writes the buffered final states that carry deliveries; other rows wait for the batch window. */
  function flushDeliveries(): Promise<void> {
    if (deliveries.size === 0) return chain;
    const outbox = deliveries;
    deliveries = new Map();
    const batch = new Map<string, Insertable<RunTable>>();
    for (const runId of outbox.keys()) {
      batch.set(runId, rows.get(runId)!);
      rows.delete(runId);
    }
    chain = chain.then(() => write(batch, outbox)).catch(options.onError);
    return chain;
  }

  let soon: Promise<void> | undefined;
  function flushSoon(): Promise<void> {
    soon ??= new Promise<void>((resolve) =>
      setImmediate(() => {
        soon = undefined;
        void flushDeliveries().then(resolve);
      })
    );
    return soon;
  }

  return {
    flushSoon,
    put(row, delivery) {
      rows.set(row.run_id, row);
      if (delivery) deliveries.set(delivery.runId, delivery);
      timer ??= setTimeout(flush, options.delayMs ?? 25);
    },
    flush,
  };
}
