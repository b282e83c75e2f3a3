/** Calls into a host with workers (`RUNPLANE_WORKERS` > 1), each on a connection of its own or a given one. */
import { Agent } from "undici";
import { checkedFetch } from "./contract.ts";
import type { ServerProcess } from "./server_process.ts";

/** A connection of its own: the supervisor hands each new connection to the next worker. */
export function connection(): Agent {
  return new Agent({ connections: 1, pipelining: 1 });
}

/** Options of `callThrough`. */
export interface CallThroughOptions {
  /** The connection to call on (default: a new one, so the next worker in turn). */
  via?: Agent;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/**
 * POSTs `body` to `path` (under the run API, e.g. `/v4/p-demo/work/echo`) with the server's token; the
 * answer and which worker took it (`X-Runplane-Worker`).
 */
export async function callThrough(
  server: ServerProcess,
  path: string,
  body: Record<string, unknown>,
  options: CallThroughOptions = {},
): Promise<{ response: Response; worker: string }> {
  const response = await checkedFetch(`${server.url}${path}`, {
    method: "POST",
    headers: { Authorization: `Bearer ${server.token}`, "Content-Type": "application/json", ...options.headers },
    body: JSON.stringify(body),
    signal: options.signal,
    dispatcher: options.via ?? connection(),
  } as RequestInit);
  return { response, worker: response.headers.get("x-runplane-worker") ?? "" };
}
