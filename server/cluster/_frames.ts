/**
 * The frames of a forwarded call's answer: NDJSON, one JSON object a line, written by the host that runs
 * the call and read by the one that forwarded it.
 *
 * ```text
 * {"deployment": id}                                   the replica's deployment, before the function runs
 * {"result": value, "runTimeMs": n}                    the function returned
 * {"stream": true} {"item": value, "event"?: name}… {"end": true}    the function streamed
 * {"error": {"type", "message", "traceback"}}          the function failed (at any point)
 * {"problem": {"status", "type", "detail", "retryAfter"?}}   it could not run (no app, queue full, …)
 * ```
 */
import type { RunErrorInfo } from "../runs/mod.ts";

/** A problem the remote answered instead of running the call: `type` is the problem's kind (`not-found`). */
export interface ProblemFrame {
  status: number;
  type: string;
  detail: string;
  /** The problem's `Retry-After`, when it had one. */
  retryAfter?: string;
}

/** One frame, as read. */
export interface Frame {
  deployment?: string;
  result?: unknown;
  runTimeMs?: number;
  stream?: true;
  item?: unknown;
  event?: string;
  end?: true;
  error?: RunErrorInfo;
  problem?: ProblemFrame;
}

/** A frame as one NDJSON line, newline included. */
export function frameLine(frame: Frame): string {
  return `${JSON.stringify(frame)}\n`;
}

/** The largest frame line read: a result or item is bounded by the replica's own limits well below it. */
export const MAX_FRAME_BYTES = 1024 ** 3;

/**
 * Splits byte chunks into lines in linear time: a line's chunks are joined once, when its newline
 * arrives (searching a growing string again per chunk would make a large result quadratic).
 */
export class LineSplitter {
  #parts: Buffer[] = [];
  #size = 0;

  /** The complete lines `chunk` ends, without their newline; throws once a line passes `MAX_FRAME_BYTES`. */
  push(chunk: Buffer): Buffer[] {
    const lines: Buffer[] = [];
    let start = 0;
    for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
      const tail = chunk.subarray(start, newline);
      lines.push(this.#parts.length ? Buffer.concat([...this.#parts, tail]) : tail);
      this.#parts = [];
      this.#size = 0;
      start = newline + 1;
    }
    if (start < chunk.length) {
      this.#size += chunk.length - start;
      if (this.#size > MAX_FRAME_BYTES) throw new Error(`a frame grew past ${MAX_FRAME_BYTES} bytes without a newline`);
      this.#parts.push(chunk.subarray(start));
    }
    return lines;
  }

  /** Bytes held of a line whose newline has not arrived. */
  get pendingBytes(): number {
    return this.#size;
  }
}
