/**
 * Serialises a JSON value as a sequence of text chunks, so a large answer (a 100,000-entry tree) is
 * written while it is encoded instead of first becoming one giant string.
 */
import { RawJson } from "../json/mod.ts";

/** Options of `jsonChunks`. */
export interface JsonChunksOptions {
  /** Roughly how many characters each chunk holds (default 64 KiB). */
  chunkChars?: number;
}

type Json = unknown;

function resolved(key: string, value: Json): Json {
  // Its text is written as it is (see `encode`), not through `toJSON`.
  if (value instanceof RawJson) return value;
  const toJSON = (value as { toJSON?: (key: string) => Json } | null)?.toJSON;
  return typeof toJSON === "function" ? toJSON.call(value, key) : value;
}

function isSkipped(value: Json): boolean {
  return value === undefined || typeof value === "function" || typeof value === "symbol";
}

/**
 * Yields `value` as JSON text in chunks whose concatenation equals `JSON.stringify(value)`. Arrays
 * are encoded one element at a time, and objects one member at a time unless they sit inside an array
 * (a record in a list is small, and encoding it whole is faster).
 */
export function* jsonChunks(value: Json, options: JsonChunksOptions = {}): Generator<string, void, undefined> {
  const limit = options.chunkChars ?? 65_536;
  let parts: string[] = [];
  let size = 0;
  function* push(text: string): Generator<string, void, undefined> {
    parts.push(text);
    size += text.length;
    if (size >= limit) {
      yield parts.join("");
      parts = [];
      size = 0;
    }
  }
  function* encode(item: Json, inArray: boolean): Generator<string, void, undefined> {
    if (item instanceof RawJson) {
      for (const piece of item.pieces()) yield* push(piece);
      return;
    }
    if (Array.isArray(item)) {
      yield* push("[");
      for (let i = 0; i < item.length; i++) {
        if (i > 0) yield* push(",");
        const element = resolved(String(i), item[i]);
        if (isSkipped(element)) yield* push("null");
        else if (Array.isArray(element) || element instanceof RawJson) yield* encode(element, true);
        else yield* push(JSON.stringify(element));
      }
      yield* push("]");
      return;
    }
    if (item !== null && typeof item === "object" && !inArray) {
      yield* push("{");
      let first = true;
      for (const [name, member] of Object.entries(item)) {
        const memberValue = resolved(name, member);
        if (isSkipped(memberValue)) continue;
        yield* push(`${first ? "" : ","}${JSON.stringify(name)}:`);
        first = false;
        yield* encode(memberValue, false);
      }
      yield* push("}");
      return;
    }
    if (typeof item === "string" && item.length > limit) {
      yield* push('"');
      for (const piece of stringPieces(item, limit)) yield* push(JSON.stringify(piece).slice(1, -1));
      yield* push('"');
      return;
    }
    yield* push(JSON.stringify(item) ?? "null");
  }
  yield* encode(resolved("", value), false);
  if (parts.length) yield parts.join("");
}

/**
 * A long string in pieces of about `size` characters, never cutting a surrogate pair (each piece's JSON
 * text is then the matching slice of the whole string's), so a 50 MB string is encoded a chunk at a time.
 */
function* stringPieces(text: string, size: number): Generator<string, void, undefined> {
  for (let start = 0; start < text.length;) {
    let end = Math.min(start + size, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end++;
    yield text.slice(start, end);
    start = end;
  }
}

/**
 * Roughly how many characters `value` encodes to, counting only until `limit` is passed (so a huge value
 * costs no more to measure than a small one). Strings count their length, every other node a few.
 */
function sizeUpTo(value: Json, limit: number): number {
  let size = 0;
  const stack: Json[] = [value];
  while (stack.length && size <= limit) {
    const item = stack.pop();
    if (item instanceof RawJson) size += item.bytes + limit;
    else if (typeof item === "string") size += item.length + 2;
    else if (Array.isArray(item)) {
      size += 2 + item.length;
      for (let i = 0; i < item.length && size <= limit; i++) stack.push(item[i]);
    } else if (item !== null && typeof item === "object") {
      for (const [name, member] of Object.entries(item)) {
        size += name.length + 4;
        stack.push(member);
        if (size > limit) break;
      }
    } else size += 8;
  }
  return size;
}

/**
 * The JSON text of `value` in one string when it is small (about `limit` characters or fewer, default
 * 64 KiB) — one `JSON.stringify`, the fast path of every ordinary answer — else undefined: encode it with
 * `jsonChunks`.
 */
export function encodeIfSmall(value: Json, limit = 65_536): string | undefined {
  return sizeUpTo(value, limit) <= limit ? (JSON.stringify(value) ?? "null") : undefined;
}
