/**
 * What of a run's result is stored (and sent in its webhook): its JSON text, up to a limit in bytes.
 * A stream keeps its first items that fit, in order; any other result is kept whole or not at all,
 * since a cut JSON value means nothing. Either way `truncated` says that something was left out.
 */
import { RawJson } from "../json/mod.ts";
import { SpillFile } from "./_spill_file.ts";

/** A result as stored. */
export interface StoredResult {
  /** The JSON text kept, or null when nothing is kept. */
  json: string | null;
  /** Whether the result was larger than the limit. */
  truncated: boolean;
}

/** The default stored-result limit (`RUNPLANE_RESULT_LIMIT`): 1 MiB. */
export const DEFAULT_RESULT_LIMIT_BYTES = 1024 * 1024;

/** Whether `text` takes more than `limit` bytes as UTF-8. */
function overLimit(text: string, limit: number): boolean {
  // A UTF-16 code unit is 1 to 3 UTF-8 bytes: most texts are decided by their length alone.
  if (text.length > limit) return true;
  if (text.length * 3 <= limit) return false;
  return Buffer.byteLength(text) > limit;
}

/**
 * A lower bound of the bytes `value` encodes to, counted only until it passes `limit`: a value found
 * bigger than the limit this way is never encoded (a 50 MB string would block for its whole length).
 */
function bytesAtLeast(value: unknown, limit: number): number {
  let size = 0;
  const stack: unknown[] = [value];
  while (stack.length && size <= limit) {
    const item = stack.pop();
    if (item instanceof RawJson) size += item.bytes;
    else if (typeof item === "string") size += item.length + 2;
    else if (Array.isArray(item)) {
      size += 1 + Math.max(1, item.length);
      for (let i = 0; i < item.length && size <= limit; i++) stack.push(item[i]);
    } else if (item !== null && typeof item === "object") {
      size += 2;
      for (const [name, member] of Object.entries(item)) {
        if (member === undefined || typeof member === "function") continue;
        size += name.length + 3;
        stack.push(member);
        if (size > limit) break;
      }
    } else size += 1;
  }
  return size;
}

/** The stored form of a whole result (a sync call's return value). */
export function storedResult(value: unknown, limitBytes: number): StoredResult {
  if (bytesAtLeast(value, limitBytes) > limitBytes) return { json: null, truncated: true };
  // A worker's big result is JSON text already (checked, ASCII): its length is its size.
  const json = value instanceof RawJson ? value.text() : JSON.stringify(value ?? null);
  return overLimit(json, limitBytes) ? { json: null, truncated: true } : { json, truncated: false };
}

const COMMA = Buffer.from(",");

/** Stored items kept in memory before they are set aside on disk (see `_spill_file.ts`). */
const IN_MEMORY_BYTES = 64 * 1024;

/** The first size of the buffer that holds a stream's items in memory; it doubles as they come. */
const FIRST_BUFFER_BYTES = 512;

/**
 * A stream's items as they arrive, serialised once each and kept while the JSON list stays within the
 * limit; after the first item that does not fit, later ones are counted out too (the stored list is a
 * prefix of the stream). At most `IN_MEMORY_BYTES` of it is held in memory: the rest waits in a spill
 * file until `result()`, so a long stream, or one whose reader stalls, holds a few KiB, not the limit.
 * What is held is UTF-8 in one buffer of its own, not a string per item: a string, the comma joined to
 * it and the list's slot cost twice the item's bytes on V8's heap, and a thousand open streams keep them
 * all alive across collections. `close()` drops what was kept when the run ends without a stored list.
 */
export class StoredItems {
  readonly #limit: number;
  /** The items held in memory as UTF-8, commas included: `#held` bytes of `#buffer`. */
  #buffer: Buffer | undefined = undefined;
  #held = 0;
  #spill: SpillFile | undefined = undefined;
  // The list's brackets.
  #bytes = 2;
  #count = 0;
  #truncated = false;

  constructor(limitBytes: number) {
    this.#limit = limitBytes;
  }

  /** Adds one item (a `RawJson` as its bytes: never decoded). */
  add(value: unknown): void {
    if (this.#truncated) return;
    const comma = this.#count ? 1 : 0;
    const held = this.#held;
    if (value instanceof RawJson) {
      const bytes = comma + value.bytes;
      if (bytes > this.#limit - this.#bytes) return void (this.#truncated = true);
      const buffer = this.#room(bytes);
      let at = held;
      if (comma) at += COMMA.copy(buffer, at);
      for (const chunk of value.chunks()) {
        buffer.set(chunk, at);
        at += chunk.length;
      }
      this.#held = at;
    } else {
      const text = JSON.stringify(value ?? null);
      if (overLimit(text, this.#limit - this.#bytes - comma)) return void (this.#truncated = true);
      const bytes = comma + Buffer.byteLength(text);
      const buffer = this.#room(bytes);
      if (comma) COMMA.copy(buffer, held);
      this.#held = held + comma + buffer.write(text, held + comma, "utf8");
    }
    this.#bytes += this.#held - held;
    this.#count++;
    if (this.#held > IN_MEMORY_BYTES) this.#setAside(held);
  }

  /** The buffer, with room for `bytes` more (grown by doubling, its held bytes copied). */
  #room(bytes: number): Buffer {
    const needed = this.#held + bytes;
    if (this.#buffer && this.#buffer.length >= needed) return this.#buffer;
    let size = Math.max(FIRST_BUFFER_BYTES, this.#buffer?.length ?? 0);
    while (size < needed) size *= 2;
    // Not from Node's shared pool: a pooled slice would keep a whole 8 KiB slab alive for each stream.
    const grown = Buffer.allocUnsafeSlow(size);
    this.#buffer?.copy(grown, 0, 0, this.#held);
    this.#buffer = grown;
    return grown;
  }

  /** Appends what is held to the spill file and frees it; `before`: the held bytes before the last item. */
  #setAside(before: number): void {
    try {
      (this.#spill ??= new SpillFile()).append([this.#buffer!.subarray(0, this.#held)]);
    } catch {
      // No room on disk for the record's copy: the stream goes on, and its stored list ends here.
      this.#bytes -= this.#held - before;
      this.#count--;
      this.#held = before;
      this.#truncated = true;
      return;
    }
    this.#buffer = undefined;
    this.#held = 0;
  }

  /** The stored list (read once: the spilled part is freed). */
  result(): StoredResult {
    let spilled: string;
    try {
      spilled = this.#spill?.take() ?? "";
    } catch {
      // The spilled part is lost (the disk failed): an empty list is the only prefix left to store.
      this.close();
      return { json: "[]", truncated: true };
    }
    const kept = this.#buffer?.toString("utf8", 0, this.#held) ?? "";
    return { json: `[${spilled}${kept}]`, truncated: this.#truncated };
  }

  /** Drops the kept items; later items are not kept (idempotent). */
  close(): void {
    this.#spill?.close();
    this.#buffer = undefined;
    this.#held = 0;
    this.#truncated = true;
  }
}
