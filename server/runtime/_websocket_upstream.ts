/**
 * Opens a WebSocket to a custom runtime's own server through its relay's Unix socket (`_relay.py` copies
 * bytes both ways, so the upgrade and the frames pass as they are): a `ws` client, with no compression,
 * no redirects, no automatic pong (pings and pongs are the caller's and the app's, passed through) and
 * `maxPayload` bounding each message the app sends.
 */
import { connect } from "node:net";
import WebSocket from "ws";
import { RunFailure } from "./_failures.ts";

/** Options of `openUpstreamWebSocket`. */
export interface UpstreamWebSocketOptions {
  /** The relay's socket (`http.sock` in the replica's socket folder). */
  socketPath: string;
  /** The run's id, sent as `X-Request-Id`. */
  runId: string;
  /** The subprotocols the caller offered (`Sec-WebSocket-Protocol`), offered to the app as they are. */
  protocols: string[];
  /** Other headers of the caller's that reach the app (never its credentials). */
  headers: Record<string, string>;
  /** The largest message the app may send, in bytes: past it the connection closes with 1009. */
  maxPayload: number;
  /** How long the app may take to answer the handshake. */
  handshakeTimeoutMs: number;
}

/** The start of an answer that is not an upgrade, for the run's error. */
function refusal(status: number, runId: string): RunFailure {
  return new RunFailure(
    "upstream_error",
    `The app's server answered ${status} to the WebSocket handshake; it must accept a WebSocket on this path`,
    { runId },
  );
}

/**
 * Connects to `ws://app/<path>` through the relay and resolves once the app accepted the upgrade, paused
 * (call `resume()` once its listeners are attached); rejects
 * with a `RunFailure` (`upstream_error`) when it refused (another status), broke or did not answer.
 */
export function openUpstreamWebSocket(path: string, options: UpstreamWebSocketOptions): Promise<WebSocket> {
  const { socketPath, runId } = options;
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(`ws://app.runplane.internal/${path}`, options.protocols, {
      createConnection: () => connect(socketPath),
      perMessageDeflate: false,
      followRedirects: false,
      autoPong: false,
      maxPayload: options.maxPayload,
      handshakeTimeout: options.handshakeTimeoutMs,
      headers: { ...options.headers, "x-request-id": runId },
    });
    const fail = (error: unknown) => {
      socket.removeAllListeners();
      socket.on("error", () => undefined);
      socket.terminate();
      reject(
        error instanceof RunFailure ? error : new RunFailure(
          "upstream_error",
          `The app's server did not accept the WebSocket: ${(error as Error).message}`,
          { runId },
        ),
      );
    };
    socket.once("unexpected-response", (request, response) => {
      response.resume();
      request.destroy();
      fail(refusal(response.statusCode ?? 0, runId));
    });
    socket.once("error", fail);
    socket.once("open", () => {
      socket.removeAllListeners();
      // What the app sends at once waits until its reader is attached (`resume()`), else it would be lost.
      socket.pause();
      resolve(socket);
    });
  });
}
