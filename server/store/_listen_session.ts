/**
 * PostgreSQL's listening session: the dedicated connection (outside the pool) that LISTENs on every
 * channel listened to and hands each NOTIFY to the channel's listeners. It connects at the first
 * listener, reconnects with jittered backoff after a loss, and then calls every listener once with no
 * payload (wake-ups may have been missed).
 */
import pg from "pg";
import type { WakeChannel, WakeListener } from "./_wake_channels.ts";

/** The listening connection's `application_name`, to find it in `pg_stat_activity`. */
export const LISTENER_APPLICATION_NAME = "runplane-listen";

/** What `ListenSession` needs. */
export interface ListenSessionOptions {
  /** Errors of the listening connection (it reconnects by itself), and of listeners that threw. */
  onError?(error: unknown): void;
  /** The first wait before reconnecting, doubled up to `maxBackoffMs` (defaults 100 ms and 5 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

/** The listeners of a PostgreSQL notifier and the session connection they are listened on. */
export class ListenSession {
  readonly #url: string;
  readonly #options: ListenSessionOptions;
  readonly #minBackoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #listeners = new Map<WakeChannel, Set<WakeListener>>();
  #session: pg.Client | undefined; // connecting or connected
  #live = false; // `session` is connected and every channel it was asked for is listened on
  readonly #listened = new Set<WakeChannel>();
  #backoffMs: number;
  #retry: NodeJS.Timeout | undefined;
  #everConnected = false;
  #closed = false;
  #waiters: Array<() => void> = [];

  constructor(url: string, options: ListenSessionOptions) {
    this.#url = url;
    this.#options = options;
    this.#minBackoffMs = options.minBackoffMs ?? 100;
    this.#maxBackoffMs = options.maxBackoffMs ?? 5_000;
    this.#backoffMs = this.#minBackoffMs;
  }

  #deliver(channel: string, payload: string | undefined): void {
    for (const listener of this.#listeners.get(channel as WakeChannel) ?? []) {
      try {
        listener(payload === undefined || payload === "" ? undefined : payload);
      } catch (error) {
        this.#options.onError?.(error);
      }
    }
  }

  #settleWaiters(): void {
    const listeners = this.#listeners;
    if (
      !this.#closed && listeners.size > 0 && !(this.#live && [...listeners.keys()].every((c) => this.#listened.has(c)))
    ) return;
    const ready = this.#waiters;
    this.#waiters = [];
    for (const resolve of ready) resolve();
  }

  async #listenOn(client: pg.Client, channel: WakeChannel): Promise<void> {
    // The channel names are fixed identifiers (see WAKE_CHANNELS), so quoting them is enough.
    await client.query(`listen "${channel}"`);
    if (client === this.#session) this.#listened.add(channel);
  }

  #lost(client: pg.Client, error?: unknown): void {
    if (error !== undefined) this.#options.onError?.(error);
    if (client !== this.#session) return;
    this.#session = undefined;
    this.#live = false;
    this.#listened.clear();
    client.end().catch(() => {});
    if (this.#closed) return;
    // Jittered (half to the whole pause): processes that lost the server at once do not all come back at once.
    const retry = setTimeout(() => this.#connect(), this.#backoffMs * (0.5 + Math.random() / 2));
    this.#retry = retry;
    retry.unref();
    this.#backoffMs = Math.min(this.#maxBackoffMs, this.#backoffMs * 2);
  }

  async #connect(): Promise<void> {
    this.#retry = undefined;
    if (this.#closed) return;
    const client = new pg.Client({
      connectionString: this.#url,
      application_name: LISTENER_APPLICATION_NAME,
      keepAlive: true,
    });
    this.#session = client;
    client.on("notification", (message) => this.#deliver(message.channel, message.payload));
    client.on("error", (error) => this.#lost(client, error));
    client.on("end", () => this.#lost(client));
    try {
      await client.connect();
      for (const channel of this.#listeners.keys()) await this.#listenOn(client, channel);
    } catch (error) {
      this.#lost(client, error);
      return;
    }
    if (client !== this.#session) return;
    this.#live = true;
    this.#backoffMs = this.#minBackoffMs;
    const reconnected = this.#everConnected;
    this.#everConnected = true;
    this.#settleWaiters();
    if (reconnected) { for (const channel of this.#listeners.keys()) this.#deliver(channel, undefined); }
  }

  /** Calls `listener` for every wake-up on `channel` (see `Notifier.listen`); returns the function that stops it. */
  listen(channel: WakeChannel, listener: WakeListener): () => void {
    if (this.#closed) throw new Error("The notifier is closed: open the store again to listen");
    let set = this.#listeners.get(channel);
    if (!set) {
      set = new Set();
      this.#listeners.set(channel, set);
      if (this.#live && this.#session) {
        const client = this.#session;
        this.#listenOn(client, channel).then(() => this.#settleWaiters(), (error) => this.#lost(client, error));
      }
    }
    set.add(listener);
    if (!this.#session && !this.#retry) void this.#connect();
    return () => {
      // The channel stays listened on: cheap, and a later listener needs no round trip.
      set.delete(listener);
    };
  }

  /** Resolves once every channel listened to so far is listened on a live connection (or on close). */
  listening(): Promise<void> {
    return new Promise((resolve) => {
      this.#waiters.push(resolve);
      this.#settleWaiters();
    });
  }

  /** Stops listening and closes the session connection. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    const client = this.#session;
    this.#session = undefined;
    this.#live = false;
    this.#settleWaiters();
    await client?.end().catch(() => {});
  }
}
