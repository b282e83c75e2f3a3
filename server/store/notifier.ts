/**
 * Wake-ups between processes sharing a store: "there is new work on this channel". On PostgreSQL,
 * LISTEN on a dedicated session connection (outside the pool; it reconnects with backoff) and
 * `pg_notify` through the pool or the caller's transaction (then it fires on commit). On SQLite (one
 * process), an in-process emitter per database file with the same interface.
 *
 * A wake-up only shortens the wait for the next poll: it carries ids or nothing, may be lost (a
 * reconnect, a full queue) and may arrive for work already taken, so a listener re-reads the store, and
 * polling alone must stay correct. Behind PgBouncer in transaction mode LISTEN does not work (the
 * session it ran on is handed to another client), so there polling is all there is.
 */
import { EventEmitter } from "node:events";
import type { Kysely, Transaction } from "kysely";
import { ListenSession } from "./_listen_session.ts";
import { notifyQuery, NotifyThrottle } from "./_pg_notify.ts";
import { checked, type WakeChannel, type WakeListener } from "./_wake_channels.ts";
import type { Database } from "./schema.ts";

export { LISTENER_APPLICATION_NAME } from "./_listen_session.ts";
export { MAX_WAKE_PAYLOAD_BYTES, WAKE_CHANNELS, type WakeChannel, type WakeListener } from "./_wake_channels.ts";

/** Something a notify runs on: the store's database, or a transaction (the wake-up then fires on commit). */
type NotifyTarget = Kysely<Database> | Transaction<Database>;

/** Sends and receives wake-ups. */
export interface Notifier {
  /**
   * Wakes every listener of `channel`, in this process and (PostgreSQL) in every other process on the
   * database. With `options.db` a transaction, the wake-up is sent when it commits (PostgreSQL; SQLite
   * delivers it on a later turn of the event loop, and a read on the same store waits for the
   * transaction to end).
   * Throws for an unknown channel or a payload of `MAX_WAKE_PAYLOAD_BYTES` or more.
   */
  notify(channel: WakeChannel, payload?: string, options?: { db?: NotifyTarget }): Promise<void>;
  /**
   * Calls `listener` for every wake-up on `channel`; returns the function that stops it. After a lost
   * connection is back, every listener is called once with no payload (wake-ups may have been missed).
   */
  listen(channel: WakeChannel, listener: WakeListener): () => void;
  /** Resolves once every channel listened to so far is listened on a live connection (or on close). */
  listening(): Promise<void>;
  /** Stops listening and closes the dedicated connection. */
  close(): Promise<void>;
}

/** Options of `postgresNotifier`. */
export interface PostgresNotifierOptions {
  /** The pool's database, where notifications are sent. */
  db: Kysely<Database>;
  /** Errors of the listening connection (it reconnects by itself). */
  onError?(error: unknown): void;
  /** The first wait before reconnecting, doubled up to `maxBackoffMs` (defaults 100 ms and 5 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

/** A notifier on PostgreSQL at `url`; it connects its listening session at the first `listen`. */
export function postgresNotifier(url: string, options: PostgresNotifierOptions): Notifier {
  const session = new ListenSession(url, options);
  const throttle = new NotifyThrottle(options.db);
  return {
    async notify(channel, payload, notifyOptions = {}) {
      checked(channel, payload);
      if (!notifyOptions.db) return await throttle.send(channel, payload ?? "");
      await notifyOptions.db.executeQuery(notifyQuery([channel, payload ?? ""]));
    },
    listen(channel, listener) {
      checked(channel, undefined);
      return session.listen(channel, listener);
    },
    listening: () => session.listening(),
    close: () => session.close(),
  };
}

// One emitter per SQLite file: stores opened on the same file in this process share wake-ups.
const LOCAL_CHANNELS = new Map<string, { emitter: EventEmitter; users: number }>();

/**
 * A notifier within this process for the SQLite file at `path`: no network, the same interface. A
 * wake-up is delivered on a later turn of the event loop, never inside `notify`.
 */
export function localNotifier(path: string, options: { onError?(error: unknown): void } = {}): Notifier {
  let shared = LOCAL_CHANNELS.get(path);
  if (!shared) {
    shared = { emitter: new EventEmitter(), users: 0 };
    shared.emitter.setMaxListeners(0);
    LOCAL_CHANNELS.set(path, shared);
  }
  shared.users++;
  const { emitter } = shared;
  const mine: Array<[WakeChannel, WakeListener]> = [];
  let closed = false;
  return {
    notify(channel, payload) {
      try {
        checked(channel, payload);
      } catch (error) {
        return Promise.reject(error);
      }
      setImmediate(() => emitter.emit(channel, payload === "" ? undefined : payload));
      return Promise.resolve();
    },
    listen(channel, listener) {
      checked(channel, undefined);
      if (closed) throw new Error("The notifier is closed: open the store again to listen");
      function guarded(payload: string | undefined): void {
        try {
          listener(payload);
        } catch (error) {
          options.onError?.(error);
        }
      }
      emitter.on(channel, guarded);
      mine.push([channel, guarded]);
      return () => {
        emitter.off(channel, guarded);
      };
    },
    listening: () => Promise.resolve(),
    close() {
      if (closed) return Promise.resolve();
      closed = true;
      for (const [channel, listener] of mine) emitter.off(channel, listener);
      if (--shared.users === 0) LOCAL_CHANNELS.delete(path);
      return Promise.resolve();
    },
  };
}
