/**
 * The WebSocket tickets of a cluster (issue 47): the same book as `websocket_tickets.ts`, kept in the
 * shared store so a ticket minted through one host opens a connection through any other. A row holds the
 * ticket's SHA-256 only, its app and its expiry (from the store's clock, which every host reads alike); a
 * ticket is consumed with one conditional `DELETE … RETURNING`, so of two hosts presented the same ticket
 * at once exactly one gets the row. Expired rows are swept by the runs' upkeep.
 */
import type { Kysely } from "kysely";
import type { Database } from "../store/mod.ts";
import {
  MAX_TICKETS_PER_PROJECT,
  newTicket,
  TICKET_LIFETIME_MS,
  ticketDigest,
  ticketRefusal,
  type WebSocketTickets,
} from "./websocket_tickets.ts";

/** Options of `createStoredWebSocketTickets`. */
export interface StoredWebSocketTicketsOptions {
  /** The store's clock (every host of the cluster reads the same time). */
  now(): number;
  /** How long a ticket lives (default `TICKET_LIFETIME_MS`). */
  lifetimeMs?: number;
}

/** Makes the cluster's ticket book over the shared store. */
export function createStoredWebSocketTickets(
  db: Kysely<Database>,
  options: StoredWebSocketTicketsOptions,
): WebSocketTickets {
  const lifetimeMs = options.lifetimeMs ?? TICKET_LIFETIME_MS;
  return {
    async mint(target) {
      const at = options.now();
      const { count } = await db.selectFrom("websocket_tickets").select((eb) => eb.fn.countAll<number>().as("count"))
        .where("project_id", "=", target.projectId).where("expires_at", ">", at).executeTakeFirstOrThrow();
      if (Number(count) >= MAX_TICKETS_PER_PROJECT) return null;
      const ticket = newTicket();
      const expiresAt = at + lifetimeMs;
      await db.insertInto("websocket_tickets").values({
        digest: ticketDigest(ticket),
        project_id: target.projectId,
        app_id: target.appId,
        expires_at: expiresAt,
      }).execute();
      return { ticket, expiresAt };
    },
    async consume(ticket, target) {
      const row = await db.deleteFrom("websocket_tickets").where("digest", "=", ticketDigest(ticket))
        .returning(["project_id", "app_id", "expires_at"]).executeTakeFirst();
      if (!row) return "unknown";
      const entry = { projectId: row.project_id, appId: row.app_id, expiresAt: Number(row.expires_at) };
      return ticketRefusal(entry, target, options.now());
    },
  };
}
