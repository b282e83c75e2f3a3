/**
 * Splits a byte stream into lines in linear time: each chunk is scanned once for newlines and a line's
 * chunks are joined once, when its newline arrives. (Appending chunks to a string and searching it again
 * made reading a 50 MB line quadratic: seconds of CPU, and every other request waited.)
 */

/** A line grew past the limit without a newline. */
export class LineTooLong extends Error {
  constructor(readonly limitBytes: number) {
    super(`a line grew past ${limitBytes} bytes without a newline`);
    this.name = "LineTooLong";
  }
}

/** Splits chunks into lines (without their newline) of at most `limitBytes` bytes, newline included. */
export class LineSplitter {
  readonly #limitBytes: number;
  #parts: Uint8Array[] = [];
  #size = 0;

  constructor(limitBytes: number) {
    this.#limitBytes = limitBytes;
  }

  /** Bytes held of a line whose newline has not arrived yet. */
  get pendingBytes(): number {
    return this.#size;
  }

  /** The complete lines `chunk` ends, in order; throws `LineTooLong` once the open line passes the limit. */
  push(chunk: Buffer): Buffer[] {
    const lines: Buffer[] = [];
    let start = 0;
    let newline: number;
    while ((newline = chunk.indexOf(10, start)) >= 0) {
      const tail = chunk.subarray(start, newline);
      if (this.#size + tail.length + 1 > this.#limitBytes) throw new LineTooLong(this.#limitBytes);
      lines.push(this.#parts.length ? Buffer.concat([...this.#parts, tail]) : tail);
      this.#parts = [];
      this.#size = 0;
      start = newline + 1;
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
