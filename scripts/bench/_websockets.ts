/**
 * The WebSocket benchmark's clients (`ws`, as the server itself uses): connections through Runplane
 * (`/v4/{project}/{app}/{path}` with the bearer token) or straight to a custom-runtime replica's relay
 * socket (the only way into its jail, and what Runplane's own side connects to), timed echoes one at a
 * time, and echoes kept in flight for a while to count messages per second.
 */
import { connect } from "node:net";
import { readdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import type { BenchServer } from "./_runplane.ts";

/** Where a benchmark connection goes: through a Runplane server, or to a replica's relay socket. */
export type WebSocketTarget =
  | { kind: "runplane"; server: BenchServer; project: string; app: string }
  | { kind: "direct"; socketPath: string };

/**
 * The relay socket (`http.sock`) of the replica a bench server started, found in its sandbox's support
 * folder (`runplane-sandbox-<pid>-*` in the temporary folder; `custom-<n>` per replica). Reaching it
 * needs the server's user (the folder is the replica's or root's). Throws unless exactly one is there.
 */
export async function relaySocketOf(server: BenchServer): Promise<string> {
  const prefix = `runplane-sandbox-${server.child.pid}-`;
  const found: string[] = [];
  for (const support of (await readdir(tmpdir())).filter((name) => name.startsWith(prefix))) {
    const replicas = await readdir(join(tmpdir(), support)).catch(() => [] as string[]);
    for (const replica of replicas.filter((name) => name.startsWith("custom-"))) {
      const dir = join(tmpdir(), support, replica);
      if ((await readdir(dir).catch(() => [] as string[])).includes("http.sock")) found.push(join(dir, "http.sock"));
    }
  }
  if (found.length !== 1) {
    throw new Error(`expected one custom replica's relay socket under ${tmpdir()}/${prefix}*, found ${found.length}`);
  }
  return found[0];
}

/** Opens one connection to `target` at `/echo`; resolves once it is open (through Runplane: the app accepted). */
export function openWebSocket(target: WebSocketTarget): Promise<WebSocket> {
  const options = { perMessageDeflate: false, maxPayload: 1024 * 1024 };
  const socket = target.kind === "runplane"
    ? new WebSocket(`${target.server.url.replace("http", "ws")}/v4/${target.project}/${target.app}/echo`, {
      ...options,
      headers: { Authorization: `Bearer ${target.server.token}` },
    })
    : new WebSocket("ws://app.runplane.internal/echo", {
      ...options,
      createConnection: () => connect(target.socketPath),
    });
  return new Promise((resolve, reject) => {
    socket.once("open", () => {
      socket.removeAllListeners("error");
      // A connection closed by the server later (a limit, a replica gone) must not throw in the bench.
      socket.on("error", () => undefined);
      resolve(socket);
    });
    socket.once("unexpected-response", (_request, response) => {
      let body = "";
      response.on("data", (chunk: Buffer) => (body += chunk));
      response.on("end", () => reject(new Error(`upgrade refused: ${response.statusCode} ${body.slice(0, 300)}`)));
    });
    socket.once("error", reject);
  });
}

/** What `openMany` opened, and why it stopped short of the count when it did. */
export interface Opened {
  sockets: WebSocket[];
  /** The first failure's message, when not every connection opened. */
  stoppedBy?: string;
}

/** Opens up to `count` connections to `target`, `batch` at a time; stops at the first batch with a failure. */
export async function openMany(target: WebSocketTarget, options: { count: number; batch?: number }): Promise<Opened> {
  const sockets: WebSocket[] = [];
  const batch = options.batch ?? 50;
  while (sockets.length < options.count) {
    const size = Math.min(batch, options.count - sockets.length);
    const results = await Promise.allSettled(Array.from({ length: size }, () => openWebSocket(target)));
    for (const result of results) if (result.status === "fulfilled") sockets.push(result.value);
    const failed = results.find((result) => result.status === "rejected");
    if (failed) return { sockets, stoppedBy: String((failed as PromiseRejectedResult).reason?.message ?? failed) };
  }
  return { sockets };
}

/** Closes `sockets` (code 1000) and waits until every one is closed, or 10 s. */
export async function closeAll(sockets: WebSocket[]): Promise<void> {
  await Promise.all(sockets.map((socket) =>
    new Promise<void>((resolve) => {
      if (socket.readyState === WebSocket.CLOSED) return resolve();
      const timer = setTimeout(() => {
        socket.terminate();
        resolve();
      }, 10_000);
      socket.once("close", () => {
        clearTimeout(timer);
        resolve();
      });
      socket.close(1000);
    })
  ));
}

/** Sends `count` messages of `text` on `socket`, each once the previous came back; their round trips in ms. */
export async function roundTrips(socket: WebSocket, options: { count: number; text: string }): Promise<number[]> {
  const times: number[] = [];
  let answered: (() => void) | undefined;
  const onMessage = () => answered?.();
  socket.on("message", onMessage);
  try {
    for (let i = 0; i < options.count; i++) {
      const echoed = new Promise<void>((resolve) => (answered = resolve));
      const started = performance.now();
      socket.send(options.text);
      await echoed;
      times.push(performance.now() - started);
    }
  } finally {
    socket.off("message", onMessage);
  }
  return times;
}

/**
 * Keeps `window` text messages of `text` in flight on each of `sockets` (a new one sent for each echo)
 * for `seconds`; the echoes received per second, all connections together.
 */
export async function echoRate(
  sockets: WebSocket[],
  options: { seconds: number; window: number; text: string },
): Promise<number> {
  let received = 0;
  let running = true;
  const listeners = sockets.map((socket) => {
    let inFlight = 0;
    const send = () => {
      while (running && inFlight < options.window) {
        inFlight++;
        socket.send(options.text);
      }
    };
    const onMessage = () => {
      inFlight--;
      received++;
      send();
    };
    socket.on("message", onMessage);
    send();
    return { socket, onMessage, drained: () => inFlight === 0 };
  });
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, options.seconds * 1000));
  const counted = received;
  const elapsed = (performance.now() - started) / 1000;
  running = false;
  // The messages still in flight are let come back, so the next measurement starts on quiet connections.
  const deadline = Date.now() + 10_000;
  while (listeners.some((l) => !l.drained()) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  for (const { socket, onMessage } of listeners) socket.off("message", onMessage);
  return counted / elapsed;
}
