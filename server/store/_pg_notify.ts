/**
 * PostgreSQL's NOTIFY as the notifier sends it: one prepared statement, and outside a transaction at
 * most one per `NOTIFY_WINDOW_MS` per channel and payload.
 */
import type { Kysely } from "kysely";
import { portableQuery } from "./_postgres.ts";
import type { WakeChannel } from "./_wake_channels.ts";
import type { Database } from "./schema.ts";

// A portable raw statement, so that the server's pool runs it prepared (it is sent under load).
/** `select pg_notify(channel, payload)`, given `[channel, payload]`. */
export const notifyQuery = portableQuery("select pg_notify(?, ?)");

/** The shortest time between two equal wake-ups sent outside a transaction (see `NotifyThrottle`). */
const NOTIFY_WINDOW_MS = 10;

/**
 * Wake-ups sent outside a transaction go at most once per `NOTIFY_WINDOW_MS` per channel and payload:
 * one asked for within the window of the last is sent at the window's end (once for all asked for
 * meanwhile), so each is still followed by a NOTIFY sent after it was asked for. Under load (an
 * accept batch every few milliseconds) this saves a statement and a commit per batch.
 */
export class NotifyThrottle {
  readonly #db: Kysely<Database>;
  readonly #throttled = new Map<string, { lastSentAt: number; trailing?: Promise<void> }>();

  /** Sends through the pool's database `db`. */
  constructor(db: Kysely<Database>) {
    this.#db = db;
  }

  /** Sends the wake-up now, or at the end of the window of the last equal one. */
  send(channel: WakeChannel, payload: string): Promise<void> {
    const db = this.#db;
    const throttled = this.#throttled;
    const key = `${channel}\n${payload}`;
    let state = throttled.get(key);
    if (!state) throttled.set(key, state = { lastSentAt: -Infinity });
    const entry = state;
    const send = () => {
      entry.lastSentAt = performance.now();
      return db.executeQuery(notifyQuery([channel, payload])).then(() => {});
    };
    const wait = entry.lastSentAt + NOTIFY_WINDOW_MS - performance.now();
    if (wait <= 0 && !entry.trailing) return send();
    entry.trailing ??= new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, wait)).unref()).then(() => {
      entry.trailing = undefined;
      return send();
    });
    return entry.trailing;
  }
}
