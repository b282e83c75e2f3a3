/**
 * A real HTTP receiver on loopback for webhook tests: answers each request as a script says and records
 * what arrived (exact body bytes, headers, time).
 */
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

/** One request the receiver got. */
export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** `performance.now()` when the request arrived. */
  at: number;
}

/** How to answer the n-th request (1-based): a status code, `hang` to never answer, or a status after a delay. */
export type Answer = number | "hang" | { status: number; afterMs: number };

/** A running receiver. */
export interface WebhookReceiver {
  url: string;
  requests: ReceivedRequest[];
  /** Resolves once `count` requests arrived, or rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** Starts a receiver on 127.0.0.1; `answer(n, request)` picks each response (default 200). */
export async function startWebhookReceiver(
  answer: (n: number, request: ReceivedRequest) => Answer = () => 200,
): Promise<WebhookReceiver> {
  const requests: ReceivedRequest[] = [];
  const waiters: Array<() => void> = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const request = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks),
        at: performance.now(),
      };
      requests.push(request);
      waiters.splice(0).forEach((wake) => wake());
      const reply = answer(requests.length, request);
      if (reply === "hang") return;
      if (typeof reply === "object") {
        setTimeout(() => res.writeHead(reply.status).end("ok"), reply.afterMs);
        return;
      }
      res.writeHead(reply, reply >= 300 && reply < 400 ? { Location: "/redirected" } : {});
      res.end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    requests,
    async waitFor(count, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (requests.length < count) {
        if (Date.now() > deadline) throw new Error(`Expected ${count} webhook requests, got ${requests.length}`);
        await new Promise<void>((resolve) => {
          waiters.push(resolve);
          setTimeout(resolve, 200);
        });
      }
    },
    close() {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** Polls `check` until it returns a value other than undefined, or throws after `timeoutMs`. */
export async function eventually<T>(
  check: () => Promise<T | undefined>,
  timeoutMs = 20_000,
  what = "condition",
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
