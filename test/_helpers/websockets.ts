/**
 * A WebSocket caller for the tests of WebSocket runs (issue 47): opens a connection with the `ws`
 * package, resolves at its 101 with the run's id (`X-Request-Id`), queues what arrives, and rejects a
 * refused upgrade with the refusal's status, answer and body.
 */
import type { IncomingMessage } from "node:http";
import WebSocket from "ws";

/** One message as it arrived. */
export type WebSocketMessage = { data: Buffer; isBinary: boolean };

/** An open connection: its socket, its run id, its messages in order, and its close once it comes. */
export interface OpenedWebSocket {
  socket: WebSocket;
  runId: string;
  /** The next message (waits for one when none is queued). */
  next(): Promise<WebSocketMessage>;
  closed: Promise<{ code: number; reason: string }>;
}

/** A refused upgrade: the error's message is the answer's body. */
export type RefusedUpgrade = Error & { status: number; response: IncomingMessage };

/** Opens `url`; `autoPong: false` makes a caller that answers no ping. */
export function openWebSocket(
  url: string,
  options: { headers?: Record<string, string>; autoPong?: boolean } = {},
): Promise<OpenedWebSocket> {
  const socket = new WebSocket(url, { headers: options.headers ?? {}, autoPong: options.autoPong ?? true });
  const queue: WebSocketMessage[] = [];
  const waiting: Array<(message: WebSocketMessage) => void> = [];
  socket.on("message", (data: Buffer, isBinary: boolean) => {
    const message = { data, isBinary };
    const waiter = waiting.shift();
    if (waiter) waiter(message);
    else queue.push(message);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    socket.once("close", (code, reason) => resolve({ code, reason: reason.toString() }))
  );
  return new Promise((resolve, reject) => {
    socket.once("upgrade", (response: IncomingMessage) => {
      resolve({
        socket,
        runId: String(response.headers["x-request-id"]),
        closed,
        next: () => queue.length ? Promise.resolve(queue.shift()!) : new Promise((r) => waiting.push(r)),
      });
    });
    socket.once("unexpected-response", (_request, response: IncomingMessage) => {
      let body = "";
      response.on("data", (chunk: Buffer) => (body += chunk));
      response.on("end", () => reject(Object.assign(new Error(body), { status: response.statusCode, response })));
    });
    socket.once("error", reject);
  });
}
