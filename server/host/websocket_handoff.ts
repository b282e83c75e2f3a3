/**
 * WebSockets on a host with workers (issue 47): a worker runs no replica, so it does not handle an
 * upgrade it takes on the port; it hands the connection itself to the supervisor over their IPC channel
 * (the socket travels as the message's handle; the worker's copy is closed once sent, Node's default
 * without `keepOpen`), with the request as it read it. The supervisor rebuilds the request and handles
 * the upgrade as a server of one process does: authentication, the ticket, the run record, the replica's
 * slot, the limits, the drain's 1001 and a dead replica's 1011 all happen where the replicas are.
 */
import type { Worker } from "node:cluster";
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { ProblemError } from "../problems/mod.ts";
import { isWebSocketHandoff, type WebSocketHandoff } from "./_messages.ts";
import type { UpgradeListener } from "./role.ts";

/** The most handoffs a worker has sent and not yet seen written to the channel, and the most the supervisor handles at once. */
export const MAX_HANDOFFS_IN_FLIGHT = 256;
/** How long a refused socket may take to close after its answer (a client that never closes its side). */
const REFUSED_CLOSE_MS = 5_000;
/** The most bytes after the request's head a worker hands over (a client waits for the 101 before it sends frames). */
const MAX_HEAD_BYTES = 65_536;

/** Answers 503 with `Retry-After` on a raw socket, before any upgrade, and closes it. */
function unavailable(socket: Duplex, detail: string): void {
  const body = JSON.stringify(new ProblemError("service-unavailable", detail).toDocument());
  socket.end(
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nRetry-After: 1\r\n"
      + `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/**
 * A worker's `upgrade` listener: hands each upgrade to the supervisor (`send` is `process.send`). Past
 * `MAX_HANDOFFS_IN_FLIGHT` not yet written, or without a supervisor, it answers 503 itself.
 */
export function handOffToSupervisor(
  send: (message: WebSocketHandoff, socket: Socket, callback: (error: Error | null) => void) => boolean,
  options: { connected(): boolean },
): UpgradeListener {
  let inFlight = 0;
  return (request, socket, head) => {
    socket.on("error", () => undefined);
    if (!(socket instanceof Socket) || socket.destroyed) return void socket.destroy();
    if (!options.connected() || inFlight >= MAX_HANDOFFS_IN_FLIGHT) {
      return unavailable(socket, "This server's supervisor cannot take WebSockets now; connect again");
    }
    // Stop reading, and take what was read past the head, so no byte stays behind in this process.
    socket.pause();
    const buffered = socket.readableLength > 0 ? (socket.read() as Buffer | null) : null;
    const bytes = buffered ? Buffer.concat([head, buffered]) : head;
    if (bytes.length > MAX_HEAD_BYTES) return void socket.destroy();
    const message: WebSocketHandoff = {
      runplane: "websocket-handoff",
      method: request.method ?? "",
      url: request.url ?? "",
      rawHeaders: request.rawHeaders,
      remoteAddress: socket.remoteAddress ?? "",
      headBase64: bytes.toString("base64"),
    };
    inFlight++;
    try {
      send(message, socket, (error) => {
        inFlight--;
        if (error) socket.destroy();
      });
    } catch {
      inFlight--;
      socket.destroy();
    }
  };
}

/** Node's header names whose repeats it drops (the first counts), as `IncomingMessage.headers` has them. */
const FIRST_ONLY = new Set([
  "age",
  "authorization",
  "content-length",
  "content-type",
  "etag",
  "expires",
  "from",
  "host",
  "if-modified-since",
  "if-unmodified-since",
  "last-modified",
  "location",
  "max-forwards",
  "proxy-authorization",
  "referer",
  "retry-after",
  "server",
  "user-agent",
]);

/** `rawHeaders` joined as Node's `IncomingMessage.headers` joins them. */
function joinedHeaders(raw: readonly string[]): IncomingHttpHeaders {
  const headers: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    const value = raw[i + 1];
    const seen = headers[name];
    if (seen === undefined) headers[name] = name === "set-cookie" ? [value] : value;
    else if (Array.isArray(seen)) seen.push(value);
    else if (!FIRST_ONLY.has(name)) headers[name] = `${seen}${name === "cookie" ? "; " : ", "}${value}`;
  }
  return headers;
}

/**
 * The request a handed-off upgrade is handled with. The worker keeps Node's `IncomingMessage` (it cannot
 * travel), so one is rebuilt with what `WebSocketUpgrades.handle` and `ws`'s `handleUpgrade` read of it:
 * method, url, headers and socket.
 */
function handedRequest(message: WebSocketHandoff, socket: Socket): IncomingMessage {
  return {
    method: message.method,
    url: message.url,
    headers: joinedHeaders(message.rawHeaders),
    rawHeaders: message.rawHeaders,
    socket,
    connection: socket,
  } as unknown as IncomingMessage;
}

/** The supervisor's side of the handoffs (see `takeHandoffs`). */
export interface HandoffReceiver {
  /**
   * Takes `message` from `worker` if it is a handoff (its socket handed to the upgrade listener), or
   * if it carries a handle it should not (destroyed). Returns whether it took it.
   */
  receive(worker: Worker, message: unknown, handle: unknown): boolean;
  /** Handed sockets not yet closed (upgrading, open, or refused and closing). */
  readonly held: number;
  /** Destroys every handed socket still held: the host stopped, its WebSockets already told 1001. */
  destroyAll(): void;
}

/** Options of `takeHandoffs`. */
export interface HandoffOptions {
  /** The supervisor's own upgrade listener (`WebSocketUpgrades.handle`). */
  upgrade: UpgradeListener;
  /** Told of a message dropped (malformed, its socket already gone, or a handle where none belongs). */
  onDropped?(worker: Worker, why: string): void;
}

/** Destroys `socket` if it is still open `REFUSED_CLOSE_MS` from now. */
function closeRefused(socket: Socket): void {
  setTimeout(() => socket.destroy(), REFUSED_CLOSE_MS).unref();
}

/** Destroys a handle of unknown kind (a socket, a server, a raw handle), if it can be. */
function destroyHandle(handle: unknown): void {
  const h = handle as { destroy?(): void; close?(): void } | null | undefined;
  try {
    if (typeof h?.destroy === "function") h.destroy();
    else if (typeof h?.close === "function") h.close();
  } catch {
    // Already closed.
  }
}

/** The supervisor's receiver of its workers' handoffs, with at most `MAX_HANDOFFS_IN_FLIGHT` upgrading at once. */
export function takeHandoffs(options: HandoffOptions): HandoffReceiver {
  const sockets = new Set<Socket>();
  let upgrading = 0;

  function take(message: WebSocketHandoff, socket: Socket): void {
    socket.on("error", () => undefined);
    if (socket.destroyed) return;
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    if (upgrading >= MAX_HANDOFFS_IN_FLIGHT) {
      unavailable(socket, "This server has too many WebSockets opening at once; connect again");
      return closeRefused(socket);
    }
    upgrading++;
    const head = Buffer.from(message.headBase64, "base64");
    void Promise.resolve()
      .then(() => options.upgrade(handedRequest(message, socket), socket, head))
      .catch(() => socket.destroy())
      .finally(() => {
        upgrading--;
        // Refused (answered and ended): it goes soon even if the client never closes its side, so no
        // drain waits on it (a worker's stop waits for the sockets it handed over).
        if (socket.writableEnded) closeRefused(socket);
      });
  }

  return {
    receive(worker, message, handle) {
      const isHandoff = (message as { runplane?: unknown } | null)?.runplane === "websocket-handoff";
      const hasHandle = handle !== undefined && handle !== null;
      if (!isHandoff) {
        if (!hasHandle) return false;
        destroyHandle(handle);
        options.onDropped?.(worker, "a message carried a handle where none belongs");
        return true;
      }
      if (!isWebSocketHandoff(message) || !(handle instanceof Socket)) {
        destroyHandle(handle);
        options.onDropped?.(
          worker,
          hasHandle ? "the handoff was malformed" : "its socket was closed before it was sent",
        );
        return true;
      }
      take(message, handle);
      return true;
    },
    get held() {
      return sockets.size;
    },
    destroyAll() {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
  };
}
