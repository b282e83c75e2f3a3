/** One byte range of a `Range` header (RFC 9110 §14): what a volume's file download answers with 206. */
import { ProblemError } from "../problems/mod.ts";

/** An inclusive byte range. */
export interface ByteRange {
  start: number;
  end: number;
}

function unsatisfiable(size: number, why: string): ProblemError {
  return new ProblemError("range-not-satisfiable", `The range ${why}; the file has ${size} bytes`, {
    headers: { "Content-Range": `bytes */${size}` },
  });
}

/**
 * The range `header` asks of a file of `size` bytes: undefined for no header (the whole file), the range
 * otherwise (`first-last`, `first-`, `-suffix`; a last past the end is cut to it). A header that is not
 * one range of bytes (malformed, another unit, several ranges) is ignored, as RFC 9110 lets a server do:
 * the whole file. Throws a 416 problem (with `Content-Range: bytes *\/size`) for a range past the end.
 */
export function parseByteRange(header: string | undefined, size: number): ByteRange | undefined {
  if (header === undefined) return undefined;
  const match = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!match || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    if (suffix === 0 || size === 0) throw unsatisfiable(size, `${header} asks for no bytes`);
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(match[1]);
  const end = match[2] === "" ? size - 1 : Math.min(Number(match[2]), size - 1);
  if (start >= size) throw unsatisfiable(size, `${header} starts past the end`);
  if (end < start) return undefined;
  return { start, end };
}
