/**
 * JSON text handed through without being parsed. A big result arrives from a worker as JSON text
 * already; parsing 50 MB into a value, only to encode it again for the answer and measure it for the
 * stored copy, blocks the event loop for hundreds of milliseconds. A `RawJson` keeps the text as the
 * chunks it arrived in: the answer writes them as they are, the stored-result cap reads `bytes`.
 */

/** Checked JSON text of one value, in chunks of ASCII bytes (whoever makes one has validated it). */
export class RawJson {
  /** The text's length in bytes (ASCII: also in characters). */
  readonly bytes: number;
  readonly #chunks: readonly Uint8Array[];

  constructor(chunks: readonly Uint8Array[], bytes: number) {
    this.#chunks = chunks;
    this.bytes = bytes;
  }

  /** The text in pieces, in order, one per chunk. */
  *pieces(): Generator<string, void, undefined> {
    for (const chunk of this.#chunks) {
      yield Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length).toString("latin1");
    }
  }

  /** The text's bytes, in order, as they arrived (not copied: do not change them). */
  chunks(): readonly Uint8Array[] {
    return this.#chunks;
  }

  /** The whole text as one string (for a small value; a big one is written with `pieces`). */
  text(): string {
    return [...this.pieces()].join("");
  }

  /** The value, for code that serialises it with `JSON.stringify` (correct, but parses the whole text). */
  toJSON(): unknown {
    return JSON.parse(this.text());
  }
}
