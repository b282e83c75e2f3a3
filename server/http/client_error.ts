/**
 * Answers for requests Node's HTTP parser refuses before any handler runs (headers too large, two
 * `Content-Length`s, a malformed request line, a request too slow to arrive): the same problem documents
 * and `X-Request-Id` as every other answer, written raw on the socket since there is no response object.
 */
import type { Server } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "../log.ts";
import { ProblemError, type ProblemKind } from "../problems/mod.ts";
import { randomBytesPooled } from "../random/mod.ts";

/** The most bytes of request line and headers Node's parser accepts (its `maxHeaderSize` default). */
export const MAX_HEADER_BYTES = 16 * 1024;

const REASONS: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  431: "Request Header Fields Too Large",
};

/** The statuses a request can get from the parser, before any operation is known (each declares them). */
export const CLIENT_ERROR_STATUSES: readonly number[] = Object.keys(REASONS).map(Number);

function problemFor(code: string | undefined): ProblemError {
  const [kind, detail]: [ProblemKind, string] = code === "HPE_HEADER_OVERFLOW"
    ? [
      "request-header-fields-too-large",
      `The request line and headers exceed ${MAX_HEADER_BYTES} bytes; send fewer or smaller headers`,
    ]
    : code === "ERR_HTTP_REQUEST_TIMEOUT"
    ? ["request-timeout", "The request did not arrive in time; send it again"]
    : [
      "bad-request",
      `The request is not valid HTTP/1.1 (${code ?? "parse error"}); check its request line and headers`,
    ];
  return new ProblemError(kind, detail);
}

interface SocketWithMessage extends Duplex {
  _httpMessage?: { headersSent?: boolean } | null;
}

/**
 * Makes `server` answer what its parser refuses with a problem document and an `X-Request-Id`, then
 * close the connection, as Node itself does (without the body and the id). Nothing is written when part
 * of a response already went out on the connection: that would corrupt it.
 */
export function answerClientErrors(server: Server, options: { logger: Logger }): void {
  server.on("clientError", (error: NodeJS.ErrnoException, socket: SocketWithMessage) => {
    if (error.code === "ECONNRESET" || !socket.writable || socket._httpMessage?.headersSent) {
      socket.destroy();
      return;
    }
    const problem = problemFor(error.code);
    const requestId = `req_${randomBytesPooled(12).toString("base64url")}`;
    const body = JSON.stringify(problem.toDocument());
    options.logger.info(
      { req_id: requestId, status: problem.status, problem: problem.kind, code: error.code },
      "request refused by the HTTP parser",
    );
    socket.end(
      `HTTP/1.1 ${problem.status} ${REASONS[problem.status]}\r\n`
        + "Content-Type: application/problem+json\r\n"
        + `Content-Length: ${Buffer.byteLength(body)}\r\n`
        + `X-Request-Id: ${requestId}\r\n`
        + "Connection: close\r\n\r\n"
        + body,
      // As Node does: the connection ends here, whatever else the client still sends.
      () => socket.destroy(),
    );
  });
}
