/**
 * Wake-ups across the processes of one host on SQLite (`RUNPLANE_WORKERS` > 1). SQLite's notifier only
 * reaches its own process; the host's workers and supervisor share the database file, so each one's
 * notifier also hands every wake-up to the others over the cluster's IPC channel (the supervisor passes
 * a worker's on to the other workers). PostgreSQL needs none of this: its notifier crosses processes.
 */
import { sql } from "kysely";
import type { Kysely } from "kysely";
import type { Database } from "./schema.ts";
import type { Notifier, WakeChannel } from "./notifier.ts";

/** A wake-up as it travels between the host's processes. */
export interface RelayedWakeUp {
  runplane: "wake-up";
  channel: WakeChannel;
  payload?: string;
}

/** Whether an IPC message is a relayed wake-up. */
export function isRelayedWakeUp(message: unknown): message is RelayedWakeUp {
  const m = message as RelayedWakeUp | null;
  return typeof m === "object" && m !== null && m.runplane === "wake-up" && typeof m.channel === "string";
}

/** Where relayed wake-ups go out and come in. */
export interface WakeUpPort {
  send(wakeUp: RelayedWakeUp): void;
  /** Calls `listener` with each wake-up another process relayed here; returns what stops it. */
  receive(listener: (wakeUp: RelayedWakeUp) => void): () => void;
}

/**
 * `local` (the store's own notifier), with every wake-up also sent through `port`, and every one that
 * arrives through it delivered to this process's listeners. A wake-up sent inside a transaction leaves
 * once `db` (the store's connection, which the transaction holds) is free again, i.e. after the commit:
 * another process reads through a connection of its own, and would otherwise look before the commit.
 */
export function relayedNotifier(local: Notifier, options: { db: Kysely<Database>; port: WakeUpPort }): Notifier {
  const stopReceiving = options.port.receive((wakeUp) => {
    local.notify(wakeUp.channel, wakeUp.payload).catch(() => {});
  });
  let closed = false;
  function send(channel: WakeChannel, payload: string | undefined): void {
    if (!closed) options.port.send({ runplane: "wake-up", channel, ...(payload === undefined ? {} : { payload }) });
  }
  return {
    async notify(channel, payload, notifyOptions) {
      await local.notify(channel, payload, notifyOptions);
      if (notifyOptions?.db === undefined || notifyOptions.db === options.db) {
        setImmediate(() => send(channel, payload));
        return;
      }
      // The transaction holds the connection: this read runs once it has ended.
      void sql`select 1`.execute(options.db).then(() => send(channel, payload), () => send(channel, payload));
    },
    listen: (channel, listener) => local.listen(channel, listener),
    listening: () => local.listening(),
    async close() {
      closed = true;
      stopReceiving();
      await local.close();
    },
  };
}
