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
import pg from "pg";
import { portableQuery } from "./_postgres.ts";
import type { Database } from "./schema.ts";

// A portable raw statement, so that the server's pool runs it prepared (it is sent under load).
const notifyQuery = portableQuery("select pg_notify(?, ?)");

/**
 * The fixed channels: new queued runs, due webhook deliveries, cancels asked of another process,
 * deployments queued or activated, run changes of watched projects, which projects are watched,
 * projects whose secrets changed, and the cluster's hosts and replica seats.
 */
export const WAKE_CHANNELS = [
  "runplane_runs",
  "runplane_deliveries",
  "runplane_cancel",
  "runplane_deployments",
  "runplane_run_events",
  "runplane_run_watch",
  "runplane_project_secrets",
  "runplane_cluster",
] as const;

/** One of `WAKE_CHANNELS`. */
export type WakeChannel = typeof WAKE_CHANNELS[number];

/** PostgreSQL refuses a NOTIFY payload of 8000 bytes or more. */
export const MAX_WAKE_PAYLOAD_BYTES = 7999;

/** Called with a wake-up's payload (ids, as the notifier's user wrote them), or undefined for none. */
export type WakeListener = (payload: string | undefined) => void;

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

/** The shortest time between two equal wake-ups sent outside a transaction (see `sendThrottled`). */
const NOTIFY_WINDOW_MS = 10;

/** The listening connection's `application_name`, to find it in `pg_stat_activity`. */
export const LISTENER_APPLICATION_NAME = "runplane-listen";

function checked(channel: WakeChannel, payload: string | undefined): void {
  if (!(WAKE_CHANNELS as readonly string[]).includes(channel)) {
    throw new Error(`Unknown wake-up channel ${JSON.stringify(channel)}: use one of ${WAKE_CHANNELS.join(", ")}`);
  }
  if (payload !== undefined && Buffer.byteLength(payload) > MAX_WAKE_PAYLOAD_BYTES) {
    throw new Error(`Wake-up payload of ${Buffer.byteLength(payload)} bytes is too large: send ids or nothing`);
  }
}

/** A notifier on PostgreSQL at `url`; it connects its listening session at the first `listen`. */
export function postgresNotifier(url: string, options: PostgresNotifierOptions): Notifier {
  const minBackoffMs = options.minBackoffMs ?? 100;
  const maxBackoffMs = options.maxBackoffMs ?? 5_000;
  const listeners = new Map<WakeChannel, Set<WakeListener>>();
  let session: pg.Client | undefined; // connecting or connected
  let live = false; // `session` is connected and every channel it was asked for is listened on
  const listened = new Set<WakeChannel>();
  let backoffMs = minBackoffMs;
  let retry: NodeJS.Timeout | undefined;
  let everConnected = false;
  let closed = false;
  let waiters: Array<() => void> = [];

  function deliver(channel: string, payload: string | undefined): void {
    for (const listener of listeners.get(channel as WakeChannel) ?? []) {
      try {
        listener(payload === undefined || payload === "" ? undefined : payload);
      } catch (error) {
        options.onError?.(error);
      }
    }
  }

  function settleWaiters(): void {
    if (!closed && listeners.size > 0 && !(live && [...listeners.keys()].every((c) => listened.has(c)))) return;
    const ready = waiters;
    waiters = [];
    for (const resolve of ready) resolve();
  }

  async function listenOn(client: pg.Client, channel: WakeChannel): Promise<void> {
    // The channel names are fixed identifiers (see WAKE_CHANNELS), so quoting them is enough.
    await client.query(`listen "${channel}"`);
    if (client === session) listened.add(channel);
  }

  function lost(client: pg.Client, error?: unknown): void {
    if (error !== undefined) options.onError?.(error);
    if (client !== session) return;
    session = undefined;
    live = false;
    listened.clear();
    client.end().catch(() => {});
    if (closed) return;
    // Jittered (half to the whole pause): processes that lost the server at once do not all come back at once.
    retry = setTimeout(connect, backoffMs * (0.5 + Math.random() / 2));
    retry.unref();
    backoffMs = Math.min(maxBackoffMs, backoffMs * 2);
  }

  async function connect(): Promise<void> {
    retry = undefined;
    if (closed) return;
    const client = new pg.Client({
      connectionString: url,
      application_name: LISTENER_APPLICATION_NAME,
      keepAlive: true,
    });
    session = client;
    client.on("notification", (message) => deliver(message.channel, message.payload));
    client.on("error", (error) => lost(client, error));
    client.on("end", () => lost(client));
    try {
      await client.connect();
      for (const channel of listeners.keys()) await listenOn(client, channel);
    } catch (error) {
      lost(client, error);
      return;
    }
    if (client !== session) return;
    live = true;
    backoffMs = minBackoffMs;
    const reconnected = everConnected;
    everConnected = true;
    settleWaiters();
    if (reconnected) { for (const channel of listeners.keys()) deliver(channel, undefined); }
  }

  // Wake-ups sent outside a transaction go at most once per `NOTIFY_WINDOW_MS` per channel and payload:
  // one asked for within the window of the last is sent at the window's end (once for all asked for
  // meanwhile), so each is still followed by a NOTIFY sent after it was asked for. Under load (an
  // accept batch every few milliseconds) this saves a statement and a commit per batch.
  const throttled = new Map<string, { lastSentAt: number; trailing?: Promise<void> }>();
  function sendThrottled(channel: WakeChannel, payload: string): Promise<void> {
    const key = `${channel}\n${payload}`;
    let state = throttled.get(key);
    if (!state) throttled.set(key, state = { lastSentAt: -Infinity });
    const entry = state;
    const send = () => {
      entry.lastSentAt = performance.now();
      return options.db.executeQuery(notifyQuery([channel, payload])).then(() => {});
    };
    const wait = entry.lastSentAt + NOTIFY_WINDOW_MS - performance.now();
    if (wait <= 0 && !entry.trailing) return send();
    entry.trailing ??= new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, wait)).unref()).then(() => {
      entry.trailing = undefined;
      return send();
    });
    return entry.trailing;
  }

  return {
    async notify(channel, payload, notifyOptions = {}) {
      checked(channel, payload);
      if (!notifyOptions.db) return await sendThrottled(channel, payload ?? "");
      await notifyOptions.db.executeQuery(notifyQuery([channel, payload ?? ""]));
    },
    listen(channel, listener) {
      checked(channel, undefined);
      if (closed) throw new Error("The notifier is closed: open the store again to listen");
      let set = listeners.get(channel);
      if (!set) {
        set = new Set();
        listeners.set(channel, set);
        if (live && session) {
          const client = session;
          listenOn(client, channel).then(settleWaiters, (error) => lost(client, error));
        }
      }
      set.add(listener);
      if (!session && !retry) void connect();
      return () => {
        // The channel stays listened on: cheap, and a later listener needs no round trip.
        set.delete(listener);
      };
    },
    listening() {
      return new Promise((resolve) => {
        waiters.push(resolve);
        settleWaiters();
      });
    },
    async close() {
      closed = true;
      clearTimeout(retry);
      const client = session;
      session = undefined;
      live = false;
      settleWaiters();
      await client?.end().catch(() => {});
    },
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
