/**
 * Where this process listens: the HTTP port (a lone server, or a host's worker, which marks its answers
 * with `X-Runplane-Worker`), or, for a host's supervisor, a Unix socket only its own user may open, where
 * its workers hand it calls (`server/host/call_server.ts`).
 */
import { createServer as createHttpServer, type IncomingMessage, type RequestListener, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import type { Config } from "../config.ts";
import { type HostRole, listenForWorkerCalls, type SupervisorRole, type WorkerCallsServer } from "../host/mod.ts";
import { answerClientErrors, type DrainGate } from "../http/mod.ts";
import type { Logger } from "../log.ts";
import type { Executors } from "../placement/mod.ts";

/** Options of `createListener`. */
export interface ListenerOptions {
  /** The HTTP app (Koa's): its `callback()` answers the port. */
  app: { callback(): RequestListener };
  logger: Logger;
  role?: HostRole;
  /** From `placeExecutors`: a supervisor runs its workers' calls on them. */
  executors: Executors;
  gate: DrainGate;
  /** WebSocket runs: the port's `upgrade` listener (none: upgrades are refused by Node, as before). */
  upgrades?: { handle(request: IncomingMessage, socket: Duplex, head: Buffer): void };
}

/** This process's listener. */
export interface ServerListener {
  /** The base URL (`unix:<socket>` for a supervisor), once listening; empty before. */
  readonly url: string;
  /** Starts listening on the configured host and port (a supervisor: its socket); resolves with the URL. */
  listen(): Promise<string>;
  /** Stops accepting connections (once); resolves when the open ones have ended. */
  stopListening(): Promise<void>;
  /** Ends the kept-alive connections that carry no request now. */
  closeIdleConnections(): void;
}

/** Makes the listener; nothing listens until `listen()`. */
export function createListener(config: Config, options: ListenerOptions): ServerListener {
  const { logger, role } = options;
  let server: Server | undefined;
  let workerCalls: WorkerCallsServer | undefined;
  let url = "";
  let listening: Promise<void> = Promise.resolve();

  /** The supervisor's endpoint: a Unix socket only its own user may open, where its workers hand it calls. */
  async function listenForWorkers(supervisor: SupervisorRole): Promise<string> {
    workerCalls = await listenForWorkerCalls(supervisor.socketPath, {
      token: supervisor.callToken,
      executor: options.executors.calls,
      hereExecutor: options.executors.forwarded,
      bodyLimitBytes: config.bodyLimitBytes,
      logger,
      gate: options.gate,
      slots: supervisor.channels,
    });
    url = `unix:${supervisor.socketPath}`;
    logger.info({ socket: supervisor.socketPath }, "supervisor listening for its workers");
    return url;
  }

  function listenOnPort(): Promise<string> {
    return new Promise((resolve, reject) => {
      const handle = options.app.callback();
      server = createHttpServer(role?.kind === "worker" ? withWorkerHeader(handle, role.id) : handle)
        .listen(config.port, config.host);
      answerClientErrors(server, { logger });
      if (options.upgrades) server.on("upgrade", options.upgrades.handle);
      server.once("error", reject);
      server.once("listening", () => {
        const address = server!.address() as AddressInfo;
        const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
        url = `http://${host === "0.0.0.0" ? "127.0.0.1" : host}:${address.port}`;
        server!.keepAliveTimeout = 65_000;
        logger.info({ url }, "listening");
        resolve(url);
      });
    });
  }

  return {
    get url() {
      return url;
    },
    listen() {
      return role?.kind === "supervisor" ? listenForWorkers(role) : listenOnPort();
    },
    stopListening() {
      if (server?.listening) listening = new Promise<void>((resolve) => server!.close(() => resolve()));
      if (workerCalls) listening = workerCalls.close();
      return listening;
    },
    closeIdleConnections() {
      server?.closeIdleConnections();
    },
  };
}

/**
 * `handle` with `X-Runplane-Worker: <id>` on every answer: which of the host's workers took the request
 * (its connection), for an operator reading a trace, and for the tests that spread calls.
 */
function withWorkerHeader(handle: RequestListener, id: number): RequestListener {
  const value = String(id);
  return (request, response) => {
    response.setHeader("X-Runplane-Worker", value);
    return handle(request, response);
  };
}
