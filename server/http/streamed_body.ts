/**
 * A request body of `application/octet-stream` handed to its handler as the request's own stream: read
 * once, as it arrives, never buffered whole or spooled (a volume's file is written where it belongs).
 */
import type { IncomingMessage } from "node:http";

/** The request's body as a stream of bytes, with its declared length when the client sent one. */
export class StreamedBody implements AsyncIterable<Uint8Array> {
  #consumed = false;

  constructor(private readonly request: IncomingMessage, readonly declaredLength: number | undefined) {}

  /** Whether the handler began reading it: a body left unread closes the connection after the answer. */
  get consumed(): boolean {
    return this.#consumed;
  }

  /** Whether the whole body arrived and was read. */
  get complete(): boolean {
    return this.request.complete;
  }

  /** The bytes as they arrive; read once. */
  [Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    if (this.#consumed) throw new Error("a streamed body is read once");
    this.#consumed = true;
    return (this.request as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
  }
}
