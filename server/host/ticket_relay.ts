/**
 * WebSocket tickets on a host with workers (issue 47). A ticket is minted over REST on whichever worker
 * takes the request, and consumed where the upgrade is handled: the supervisor, which every worker hands
 * its WebSockets (`websocket_handoff.ts`). So the supervisor holds the host's one ticket book, and a
 * worker asks it to mint over their IPC channel: a ticket then opens a connection through any worker,
 * once, without a table in the store (the book stays in memory, by digest only, as on one process).
 */
import type { Worker } from "node:cluster";
import { isTicketMint, isTicketMinted, type TicketMint, type TicketMinted } from "./_messages.ts";
import type { RelayedTicket, RelayedTicketTarget } from "./role.ts";

/** How long a worker waits for the supervisor's answer before it gives up. */
const ANSWER_TIMEOUT_MS = 10_000;

/**
 * A worker's ticket minting: asks its supervisor, over this process's IPC channel. Rejects when the
 * supervisor is gone or does not answer in time.
 */
export function askSupervisorForTickets(): (target: RelayedTicketTarget) => Promise<RelayedTicket | null> {
  let nextId = 1;
  const waiting = new Map<number, { resolve(minted: RelayedTicket | null): void; reject(error: Error): void }>();
  process.on("message", (message: unknown) => {
    if (!isTicketMinted(message)) return;
    waiting.get(message.id)?.resolve(message.minted);
    waiting.delete(message.id);
  });
  process.once("disconnect", () => {
    for (const pending of waiting.values()) pending.reject(new Error("The host's supervisor is gone"));
    waiting.clear();
  });
  return (target) =>
    new Promise((resolve, reject) => {
      if (!process.connected || !process.send) return reject(new Error("The host's supervisor is gone"));
      const id = nextId++;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error("The host's supervisor did not mint the ticket in time"));
      }, ANSWER_TIMEOUT_MS);
      const settle = <T>(then: (value: T) => void) => (value: T) => {
        clearTimeout(timer);
        then(value);
      };
      waiting.set(id, { resolve: settle(resolve), reject: settle(reject) });
      const ask: TicketMint = { runplane: "ticket-mint", id, projectId: target.projectId, appId: target.appId };
      process.send(ask, undefined, {}, (error) => {
        if (!error) return;
        waiting.get(id)?.reject(error);
        waiting.delete(id);
      });
    });
}

/**
 * The supervisor's side: answers `message` from `worker` when it asks for a ticket (minted by `mint`, the
 * supervisor's book). Returns whether it was such a message.
 */
export function answerTicketMint(
  worker: Worker,
  message: unknown,
  mint: (target: RelayedTicketTarget) => Promise<RelayedTicket | null>,
): boolean {
  if (!isTicketMint(message)) return false;
  void mint({ projectId: message.projectId, appId: message.appId }).then((minted) => {
    const answer: TicketMinted = { runplane: "ticket-minted", id: message.id, minted };
    if (worker.isConnected()) worker.send(answer);
  });
  return true;
}
