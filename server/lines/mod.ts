/**
 * Lines: the one splitter of a byte stream into lines, used by every reader of line protocols (a Python
 * worker's messages, a forwarded call's NDJSON frames, a worker's calls over the supervisor's socket).
 *
 * Splits a byte stream into lines in linear time: each chunk is scanned once for newlines and a line's
 * chunks are joined once, when its newline arrives. (Appending chunks to a string and searching it again
 * made reading a 50 MB line quadratic: seconds of CPU, and every other request waited.) A line may
 * announce a payload: that many raw bytes follow it, handed over as the chunks they arrived in, never
 * joined or scanned.
 */

/** A line grew past the limit without a newline. */
export class LineTooLong extends Error {
  constructor(readonly limitBytes: number) {
    super(`a line grew past ${limitBytes} bytes without a newline`);
    this.name = "LineTooLong";
  }
}

/** A line that announced a payload, with the raw bytes that followed it, in the chunks they arrived in. */
export interface Payload {
  line: Buffer;
  chunks: Buffer[];
  bytes: number;
}

/** Options of `LineSplitter`. */
export interface LineSplitterOptions {
  /** How many raw bytes follow `line` (0 for none); called for each line as it is split off. */
  payloadBytes?(line: Buffer): number;
}

/** Splits chunks into lines (without their newline) of at most `limitBytes` bytes, newline included. */
export class LineSplitter {
  readonly #limitBytes: number;
  readonly #payloadBytes: (line: Buffer) => number;
  #parts: Uint8Array[] = [];
  #size = 0;
  /** The payload being read, and how many of its bytes are still to come. */
  #payload: Payload | undefined;
  #payloadLeft = 0;

  constructor(limitBytes: number, options: LineSplitterOptions = {}) {
    this.#limitBytes = limitBytes;
    this.#payloadBytes = options.payloadBytes ?? (() => 0);
  }

  /** Bytes held of a line whose newline has not arrived yet. */
  get pendingBytes(): number {
    return this.#size;
  }

  /**
   * The complete lines `chunk` ends, in order, a line that announced a payload once the payload is
   * complete; throws `LineTooLong` once the open line passes the limit.
   */
  push(chunk: Buffer): Array<Buffer | Payload> {
    const lines: Array<Buffer | Payload> = [];
    let start = 0;
    let newline: number;
    for (;;) {
      if (this.#payload) {
        const take = Math.min(this.#payloadLeft, chunk.length - start);
        if (take > 0) this.#payload.chunks.push(chunk.subarray(start, start + take));
        start += take;
        this.#payloadLeft -= take;
        if (this.#payloadLeft > 0) return lines;
        lines.push(this.#payload);
        this.#payload = undefined;
      }
      if ((newline = chunk.indexOf(10, start)) < 0) break;
      const tail = chunk.subarray(start, newline);
      if (this.#size + tail.length + 1 > this.#limitBytes) throw new LineTooLong(this.#limitBytes);
      const line = this.#parts.length ? Buffer.concat([...this.#parts, tail]) : tail;
      this.#parts = [];
      this.#size = 0;
      start = newline + 1;
      const bytes = this.#payloadBytes(line);
      if (bytes > 0) {
        this.#payload = { line, chunks: [], bytes };
        this.#payloadLeft = bytes;
      } else lines.push(line);
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start);
      this.#size += rest.length;
      if (this.#size >= this.#limitBytes) throw new LineTooLong(this.#limitBytes);
      this.#parts.push(rest);
    }
    return lines;
  }
}
