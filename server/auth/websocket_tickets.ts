/**
 * WebSocket tickets (issue 47): a browser cannot send `Authorization` with a WebSocket, and a long-lived
 * token must never be put in a URL (it lands in logs, histories and `Referer`s). A caller with the `run`
 * scope mints a ticket for one app; it opens one connection to that app, once, within its lifetime.
 *
 * Tickets are kept in this process's memory, by their SHA-256 only (a heap dump shows no usable
 * ticket), and swept once expired. On a host with workers the supervisor holds the book, where the
 * upgrades are handled, and the workers ask it to mint (`server/host/ticket_relay.ts`). A cluster's hosts
 * keep them in the shared store instead (`stored_websocket_tickets.ts`), so a ticket minted through one
 * host opens a connection through another.
 */
import { createHash } from "node:crypto";
import { randomBytesPooled } from "../random/mod.ts";

/** How long a ticket opens a connection. */
export const TICKET_LIFETIME_MS = 60_000;

/** The most tickets one project may hold unused at once (a bound on memory). */
const MAX_PER_PROJECT = 1_000;

/** A minted ticket: pass `ticket` as `?ticket=` before `expiresAt`. */
export interface MintedTicket {
  ticket: string;
  /** When it expires, in ms since the epoch. */
  expiresAt: number;
}

/** What a ticket is for. */
export interface TicketTarget {
  projectId: string;
  appId: string;
}

/** Why a ticket was refused: unknown (never minted, used or swept), expired, or for another app. */
export type TicketRefusal = "unknown" | "expired" | "other-app";

/** Options of `createWebSocketTickets`. */
export interface WebSocketTicketsOptions {
  /** The clock (default `Date.now`). */
  now?(): number;
  /** How long a ticket lives (default `TICKET_LIFETIME_MS`). */
  lifetimeMs?: number;
}

/** The tickets of this process. */
export interface WebSocketTickets {
  /**
   * Mints a ticket for `target`; null when its project holds too many unused ones. Asynchronous: a host's
   * worker asks its supervisor, which holds the host's book.
   */
  mint(target: TicketTarget): Promise<MintedTicket | null>;
  /**
   * Consumes `ticket` for a connection to `target`: null when it opens it, else why not. A ticket is
   * gone once presented, whatever the answer (a leaked one tried elsewhere is spent).
   */
  consume(ticket: string, target: TicketTarget): Promise<TicketRefusal | null>;
}

interface Held extends TicketTarget {
  expiresAt: number;
}

/** The key a ticket is held by: its SHA-256, base64url. */
export function ticketDigest(ticket: string): string {
  return createHash("sha256").update(ticket).digest("base64url");
}

/** A new ticket: 32 random bytes, base64url (256 bits, never guessed within a minute). */
export function newTicket(): string {
  return Buffer.from(randomBytesPooled(32)).toString("base64url");
}

/** The most tickets one project may hold unused at once (a bound on memory, or on the store's table). */
export const MAX_TICKETS_PER_PROJECT = MAX_PER_PROJECT;

/** Why `entry` does not open a connection to `target` at `at`, or null when it does. */
export function ticketRefusal(
  entry: TicketTarget & { expiresAt: number },
  target: TicketTarget,
  at: number,
): TicketRefusal | null {
  if (entry.expiresAt <= at) return "expired";
  if (entry.projectId !== target.projectId || entry.appId !== target.appId) return "other-app";
  return null;
}

/** Makes this process's ticket book. */
export function createWebSocketTickets(options: WebSocketTicketsOptions = {}): WebSocketTickets {
  const now = options.now ?? Date.now;
  const lifetimeMs = options.lifetimeMs ?? TICKET_LIFETIME_MS;
  const held = new Map<string, Held>();
  const perProject = new Map<string, number>();

  function forget(key: string, entry: Held): void {
    held.delete(key);
    const left = (perProject.get(entry.projectId) ?? 1) - 1;
    if (left > 0) perProject.set(entry.projectId, left);
    else perProject.delete(entry.projectId);
  }

  function sweep(at: number): void {
    for (const [key, entry] of held) if (entry.expiresAt <= at) forget(key, entry);
  }

  return {
    mint(target) {
      const at = now();
      if ((perProject.get(target.projectId) ?? 0) >= MAX_PER_PROJECT) sweep(at);
      if ((perProject.get(target.projectId) ?? 0) >= MAX_PER_PROJECT) return Promise.resolve(null);
      const ticket = newTicket();
      const expiresAt = at + lifetimeMs;
      held.set(ticketDigest(ticket), { projectId: target.projectId, appId: target.appId, expiresAt });
      perProject.set(target.projectId, (perProject.get(target.projectId) ?? 0) + 1);
      if (held.size % 256 === 0) sweep(at);
      return Promise.resolve({ ticket, expiresAt });
    },
    consume(ticket, target) {
      const key = ticketDigest(ticket);
      const entry = held.get(key);
      if (!entry) return Promise.resolve("unknown");
      forget(key, entry);
      return Promise.resolve(ticketRefusal(entry, target, now()));
    },
  };
}
